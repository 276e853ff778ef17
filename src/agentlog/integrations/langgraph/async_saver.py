"""The asyncio saver, :class:`AsyncAgentlogSaver`, on :mod:`agentlog.aio`."""

from __future__ import annotations

import asyncio
import builtins
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from langgraph.checkpoint.serde.base import SerializerProtocol

from agentlog import CheckpointConflictError, IdempotencyKeyError, StorageUnavailableError
from agentlog.aio import AsyncBaseCheckpointer, AsyncSqliteCheckpointer

from .core import RETRIES, Core
from .index import Plan
from .maintenance import Maintenance, Op
from .saver import DEFAULT_LANGGRAPH_TENANT, SaverBase

__all__ = ["AsyncAgentlogSaver"]

_T = TypeVar("_T")


class AsyncAgentlogSaver(SaverBase):
    """:class:`AgentlogSaver` for asyncio hosts, on :mod:`agentlog.aio`.

    ``target`` is a path (an :class:`~agentlog.aio.AsyncSqliteCheckpointer`
    is opened for ``tenant`` on ``engine`` and closed by :meth:`aclose`) or
    an open :class:`~agentlog.aio.AsyncBaseCheckpointer` (not closed). Every
    write goes to that checkpointer's writer thread (group-committed with
    others); reads are short WAL reads on the loop, as in :mod:`agentlog.aio`.
    The sync methods work from other threads (they run on the saver's loop);
    called on the loop itself, the writing ones raise.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | AsyncBaseCheckpointer,
        *,
        tenant: str = DEFAULT_LANGGRAPH_TENANT,
        engine: str | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self._owns = not isinstance(target, AsyncBaseCheckpointer)
        if isinstance(target, AsyncBaseCheckpointer):
            self.log = target
        else:
            self.log = AsyncSqliteCheckpointer(target, tenant=tenant, engine=engine)
        self._core = Core(self.log.backend, self.serde)
        self._maintenance = Maintenance(self._core)
        self.loop: asyncio.AbstractEventLoop | None = None

    async def aclose(self) -> None:
        """Finish queued writes and close the log if the saver opened it."""
        if self._owns:
            await self.log.aclose()

    async def __aenter__(self) -> AsyncAgentlogSaver:
        self.loop = asyncio.get_running_loop()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- writes -----------------------------------------------------------------

    # The sync saver's _commit again, but the lock is let go across the
    # await (a thread lock cannot be held over one): a twin by necessity.
    async def _acommit(self, make: Callable[[], Plan | None]) -> None:
        self.loop = asyncio.get_running_loop()
        core = self._core
        for _ in range(RETRIES):
            with core.lock:
                plan = make()
                if plan is None:
                    return
                events = core.stamp(plan)
            try:
                await self.log.append(
                    plan.sess.sid, events, expected_head=plan.expected, key=core.append_key(plan)
                )
            except IdempotencyKeyError:
                return  # a retry of a put that landed: nothing written (see the sync saver)
            except CheckpointConflictError:
                with core.lock:
                    core.conflicted(plan)
                continue
            with core.lock:
                core.committed(plan)
            return
        raise StorageUnavailableError(f"gave up after {RETRIES} conflicting writers")

    async def _arun(self, plan: Callable[[], builtins.list[Op]]) -> None:
        self.loop = asyncio.get_running_loop()
        core = self._core
        with core.lock:
            ops = plan()
        try:
            for op in ops:
                if op[0] == "delete":
                    await self.log.delete(op[1])
                elif op[0] == "fork":
                    await self.log.fork(op[1], op[2], op[3])
                else:
                    await self.log.append(op[1], op[2], expected_head=op[3])
        finally:
            with core.lock:
                self._maintenance.done(ops)

    # -- sync faces, from other threads ----------------------------------------

    def _on_loop(self, make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        loop = self.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            raise asyncio.InvalidStateError(
                "AsyncAgentlogSaver writes are coroutines: await the a… method "
                "(the sync ones are for other threads, once the saver has a loop)"
            )
        return asyncio.run_coroutine_threadsafe(make(), loop).result()

    def _commit(self, make: Callable[[], Plan | None]) -> None:
        self._on_loop(lambda: self._acommit(make))

    def _run(self, plan: Callable[[], builtins.list[Op]]) -> None:
        self._on_loop(lambda: self._arun(plan))
