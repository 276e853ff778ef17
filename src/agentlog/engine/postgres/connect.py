"""How a store's connections are made, and what psycopg's errors become."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from ...errors import OutcomeUnknownError, StorageDataError, StorageUnavailableError
from .deadline import check_client_timeout
from .schema import DEFAULT_SCHEMA, check_schema_name

__all__ = [
    "DEFAULT_OPTIONS",
    "OutcomeUnknownIfLost",
    "PostgresOptions",
    "connect_options",
    "connection_lost",
    "outcome_unknown",
    "pool_arguments",
    "pool_sizes",
    "read_again",
    "recovered",
    "retried",
    "session_settings",
    "statement_timeout_sql",
    "translate_errors",
    "translated",
]

#: Operators' news of PostgreSQL: retries and their outcomes, schema steps, refusals.
_log = logging.getLogger("agentlog.postgres")


@dataclass(frozen=True, kw_only=True)
class PostgresOptions:
    """How a store is opened: the keywords of the public PostgreSQL openers
    (:class:`~agentlog.PostgresCheckpointer` documents them). The schema name
    and the client timeout are checked here, when the object is made; the
    pool's bounds and the server's timeouts are psycopg's and the server's to
    check. One object, so that the two drivers' databases do not spell the
    list again; keywords only, so that its order is no part of it."""

    schema: str = DEFAULT_SCHEMA
    pool_min_size: int = 1
    pool_max_size: int = 8
    pool_timeout: float = 30.0
    connect_timeout: float = 10.0
    statement_timeout_ms: int | None = 30_000
    notify: bool = True
    create: bool = True
    read_only: bool = False
    client_timeout: float | None = 60.0

    def __post_init__(self) -> None:
        check_schema_name(self.schema)
        check_client_timeout(self.client_timeout)


#: The options a store opens with when given none.
DEFAULT_OPTIONS = PostgresOptions()


def read_again(error: psycopg.Error, attempt: int, attempts: int) -> bool:
    """Whether a read that failed with ``error`` on try ``attempt`` of ``attempts``
    goes again, on the pool's next connection: when the server dropped the
    one it had (a read changes nothing), never for a timeout."""
    if isinstance(error, (PoolTimeout, psycopg.errors.QueryCanceled)):
        return False
    return isinstance(error, (psycopg.OperationalError, psycopg.InterfaceError)) and (
        attempt < attempts
    )


def retried(what: str, error: psycopg.Error, attempt: int, attempts: int) -> bool:
    """:func:`read_again`, told to the operator: a retry (INFO), a read that
    failed after retries (WARNING)."""
    again = read_again(error, attempt, attempts)
    if again:
        _log.info("%s lost its connection (%s): trying again", what, error)
    elif attempt > 1:
        _log.warning("%s failed after %d tries: %s", what, attempt, error)
    return again


def recovered(what: str, attempt: int) -> None:
    """A read that succeeded on try ``attempt``: told (INFO) after a retry."""
    if attempt > 1:
        _log.info("%s succeeded on try %d, after a lost connection", what, attempt)


def connection_lost(error: BaseException) -> bool:
    """Whether ``error`` (agentlog's, translated from psycopg's) is a lost
    connection: the server or the network dropped it (a reset, a terminated
    backend, a shutdown, a client-side deadline that gave it up) while a
    statement may have been under way. Not a pool timeout (no connection was
    had) nor a statement timeout (the server cancelled it: rolled back)."""
    cause = error.__cause__
    if isinstance(cause, (PoolTimeout, psycopg.errors.QueryCanceled)):
        return False
    return isinstance(cause, (psycopg.OperationalError, psycopg.InterfaceError))


def outcome_unknown(what: str, error: StorageUnavailableError) -> OutcomeUnknownError:
    """The error for an unkeyed write that lost its connection (see
    :func:`connection_lost`): it may have committed, and nothing can tell."""
    return OutcomeUnknownError(
        f"{what}: the connection was lost before the outcome was known; the write may or"
        f" may not be in the store (append with a key to have it resolved): {error}"
    )


class OutcomeUnknownIfLost:
    """Around an unkeyed write (``with OutcomeUnknownIfLost("appending"):``): a
    lost connection (:func:`connection_lost`) raises :func:`outcome_unknown`'s
    error, as the write may have committed; every other error passes as it is.

    A class, not ``contextlib.contextmanager``: it sits on every append, and
    the generator-based form cost six times as much a call."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if isinstance(error, StorageUnavailableError) and connection_lost(error):
            raise outcome_unknown(self.what, error) from error


def translated(what: str, exc: psycopg.Error) -> Exception:
    """agentlog's typed error for psycopg's ``exc`` (see :func:`translate_errors`)."""
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return StorageUnavailableError(f"{what}: PostgreSQL is unavailable: {exc}")
    if isinstance(exc, (psycopg.DataError, psycopg.IntegrityError)):
        return StorageDataError(f"{what}: {exc}")
    return StorageUnavailableError(f"{what}: {type(exc).__name__}: {exc}")


@contextlib.contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Turn psycopg's errors into agentlog's typed ones.

    Lost connections, a server that is gone or shutting down, pool timeouts,
    statement timeouts, deadlocks and serialisation failures are
    :class:`StorageUnavailableError` (retryable: nothing of a failed call is
    half-written, but a write that failed may have committed — read the
    head to know); bad data is :class:`StorageDataError`.
    """
    try:
        yield
    except psycopg.Error as exc:
        raise translated(what, exc) from exc


def connect_options(connect_timeout: float) -> dict[str, Any]:
    """How every connection of a store is opened (the sync and async twins alike)."""
    return {"autocommit": True, "connect_timeout": max(1, round(connect_timeout))}


def pool_sizes(pool_min_size: int, pool_max_size: int, pool_timeout: float) -> dict[str, Any]:
    """A store's pool bounds, as ``ConnectionPool`` and ``AsyncConnectionPool`` take them."""
    return {
        "min_size": pool_min_size,
        "max_size": max(pool_min_size, pool_max_size),
        "timeout": pool_timeout,
    }


def pool_arguments(
    kwargs: dict[str, Any], options: PostgresOptions, configure: Any, name: str
) -> dict[str, Any]:
    """What a store's ``ConnectionPool`` or ``AsyncConnectionPool`` is made with
    (but the target and whether it opens at once)."""
    sizes = pool_sizes(options.pool_min_size, options.pool_max_size, options.pool_timeout)
    return {"kwargs": kwargs, "configure": configure, "name": name, **sizes}


def statement_timeout_sql(ms: int) -> str:
    """What a pool runs on each new connection to bound its statements."""
    return f"SET statement_timeout = {int(ms)}"


def session_settings(options: PostgresOptions) -> list[str]:
    """What a pool made for ``options`` runs on each new connection (either driver's)."""
    settings = []
    if options.statement_timeout_ms is not None:
        settings.append(statement_timeout_sql(options.statement_timeout_ms))
    if options.read_only:
        settings.append("SET default_transaction_read_only = on")
    return settings
