"""SQLite's result codes and the engines' refusals as agentlog's typed errors.

One table from SQLite's primary result codes to exceptions serves both
engines (the C twin passes its codes, the pure twin the standard library's),
and the errors an append comes to — a seq bound, the session bound, a
closed or read-only database — are built here once for both twins (the C
twin's writer thread reports them as status codes, see ``cengine._outcome``).
"""

from __future__ import annotations

import logging
from typing import TypeVar

from ..errors import CorruptDatabaseError, StorageDataError, StorageUnavailableError
from . import schema as S

__all__ = [
    "CLOSED",
    "SQLITE_BUSY",
    "SQLITE_CORRUPT",
    "SQLITE_LOCKED",
    "driver_error",
    "opening_error",
    "read_only_refusal",
    "refused",
    "too_long",
    "too_many_sessions",
]

SQLITE_BUSY, SQLITE_LOCKED, SQLITE_NOMEM = 5, 6, 7
SQLITE_CORRUPT, SQLITE_TOOBIG, SQLITE_NOTADB = 11, 18, 26
_ERRORS: dict[int, type[Exception]] = {
    SQLITE_BUSY: StorageUnavailableError,
    SQLITE_LOCKED: StorageUnavailableError,
    SQLITE_NOMEM: MemoryError,
    SQLITE_CORRUPT: CorruptDatabaseError,
    SQLITE_TOOBIG: StorageDataError,  # no retry makes it fit
    SQLITE_NOTADB: CorruptDatabaseError,
}


_E = TypeVar("_E", bound=Exception)


def refused(error: _E, logger: str = "agentlog.engine") -> _E:
    """``error``, a file or store refused (of another application, a newer
    version, not a regular file), told first as a WARNING of ``logger``:
    an operator hears of it though the caller may swallow it."""
    logging.getLogger(logger).warning("refused: %s", error)
    return error


#: The attribute a driver error carries its ``(code, message)`` in.
_DRIVER_DETAIL = "sqlite_error"


def driver_error(code: int, message: str, context: str) -> Exception:
    """The typed error for a SQLite result code (extended codes too), in ``context``.

    Busy and locked become :class:`StorageUnavailableError` saying so, corrupt
    and not-a-database :class:`CorruptDatabaseError`, out-of-memory
    ``MemoryError``; every other failure (I/O, a full disk, a read-only or
    unopenable file, …) :class:`StorageUnavailableError`.
    """
    primary = code & 0xFF
    kind = _ERRORS.get(primary, StorageUnavailableError)
    if primary in (SQLITE_BUSY, SQLITE_LOCKED):
        error = kind(f"{context}: database is busy ({message})")
    else:
        error = kind(f"{context}: {message}")
    # Kept so that an error met while opening can be restated naming the file.
    setattr(error, _DRIVER_DETAIL, (code, message))
    return error


def opening_error(exc: BaseException, path: str) -> BaseException:
    """A driver error met while opening ``path``, restated so that it names the file."""
    detail = getattr(exc, _DRIVER_DETAIL, None)
    if detail is None:
        return exc
    code, message = detail
    return driver_error(code, message, f"cannot open {path!r}")


# -- what an append (or another write) comes to ------------------------------------------

#: Why a closed engine refuses (a fork child's engine says more).
CLOSED = "the database is closed"


def too_long(name: str) -> ValueError:
    """An append that would take session ``name`` past the seq bound (refused alone)."""
    return ValueError(f"session {name!r} would exceed {S.MAX_SEQ} events")


def too_many_sessions() -> StorageUnavailableError:
    """A new session past the sid bound."""
    return StorageUnavailableError("the database holds too many sessions")


def read_only_refusal(context: str, path: str) -> StorageUnavailableError:
    """A write (``context``) to a database opened read-only."""
    return StorageUnavailableError(f"{context}: {path!r} is open read-only")
