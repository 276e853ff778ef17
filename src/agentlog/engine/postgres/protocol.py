"""The steps an operation yields, and the helpers that yield one.

Each PostgreSQL operation of agentlog is written once, as a generator: it
yields a :data:`Step` (a statement and its parameters, several statements to
send together, or a ``COPY``) and is sent back what the server returned;
what it returns is the operation's result. It does no I/O itself, so one
body serves the synchronous driver (:mod:`.sync`) and the asynchronous one
(:mod:`.aio`) — the split psycopg makes between its ``generators`` and its
``waiting`` code, one level up. A step is a plain tuple: operations sit on
the hot path.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, TypeVar

__all__ = [
    "ALL",
    "NONE",
    "ONE",
    "Copy",
    "Execute",
    "Fetch",
    "Operation",
    "Params",
    "Pipeline",
    "Step",
    "execute",
    "fetch_all",
    "fetch_one",
    "pipeline",
]

_T = TypeVar("_T")

#: What a statement's step is sent back: its first row (or ``None``), every
#: row (none for a statement that returns none), or the count of rows it changed.
Fetch = Literal["one", "all", "none"]
ONE: Fetch = "one"
ALL: Fetch = "all"
NONE: Fetch = "none"

#: A statement's parameters: positional (``%s``) or named (``%(name)s``).
Params = Sequence[Any] | Mapping[str, Any]


class Execute(NamedTuple):
    """Run ``statement`` with ``params``; ``binary`` asks for binary results."""

    statement: str
    params: Params = ()
    fetch: Fetch = ALL
    binary: bool = False


class Pipeline(NamedTuple):
    """Send ``steps`` together (one round trip); a list of their results, in order."""

    steps: Sequence[Execute]


class Copy(NamedTuple):
    """``COPY … FROM STDIN`` (``statement``), writing ``rows``; sent back ``None``."""

    statement: str
    rows: Iterable[Sequence[Any]]


#: One step of an operation.
Step = Execute | Pipeline | Copy

#: An operation: yields steps, is sent their results, returns its own.
Operation = Generator[Step, Any, _T]


def fetch_one(
    statement: str, params: Params = (), *, binary: bool = False
) -> Operation[tuple[Any, ...] | None]:
    """The first row of ``statement`` (``None`` when it returns none)."""
    row: tuple[Any, ...] | None = yield Execute(statement, params, ONE, binary)
    return row


def fetch_all(
    statement: str, params: Params = (), *, binary: bool = False
) -> Operation[list[tuple[Any, ...]]]:
    """Every row of ``statement`` (none for a statement that returns none)."""
    rows: list[tuple[Any, ...]] = yield Execute(statement, params, ALL, binary)
    return rows


def execute(statement: str, params: Params = ()) -> Operation[int]:
    """Run ``statement``; the count of rows it changed."""
    count: int = yield Execute(statement, params, NONE)
    return count


def pipeline(steps: Sequence[Execute]) -> Operation[list[Any]]:
    """``steps`` sent together; their results, in order."""
    results: list[Any] = yield Pipeline(steps)
    return results
