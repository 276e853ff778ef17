"""Closing: the context-manager protocol every closable agentlog object shares.

``with obj:`` (or ``async with``) refuses an object that is already closed
and closes it on the way out; a class supplies ``closed`` and ``close()``
(or ``aclose()``).
"""

from __future__ import annotations

from typing import TypeVar

from .errors import CheckpointerClosedError

__all__ = ["AsyncClosable", "Closable"]

_Self = TypeVar("_Self", bound="Closable")
_AsyncSelf = TypeVar("_AsyncSelf", bound="AsyncClosable")


class Closable:
    """A resource used as ``with obj: …``."""

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the resource; idempotent."""
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        if self.closed:
            raise CheckpointerClosedError(f"this {type(self).__name__} is closed")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncClosable:
    """A resource used as ``async with obj: …``."""

    @property
    def closed(self) -> bool:
        """Whether closing has begun."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release the resource; idempotent."""
        raise NotImplementedError

    async def __aenter__(self: _AsyncSelf) -> _AsyncSelf:
        if self.closed:
            raise CheckpointerClosedError(f"this {type(self).__name__} is closed")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
