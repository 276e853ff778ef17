"""Opening the store a command names: never creating one, read-only unless it writes."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from ..events import SessionInfo
from ..locations import is_postgres, shown
from ..log import BaseCheckpointer, FileCheckpointer, SqliteCheckpointer, is_file_store
from ..stores import DEFAULT_TENANT
from .output import UsageError, safe

__all__ = [
    "Checkable",
    "Tenanted",
    "has_session",
    "open_database",
    "open_log",
    "open_storage",
    "open_store",
    "refuse_empty_tenant",
    "require_session",
]


def _open_postgres(
    location: str, *, write: bool, tenant: str, schema: str | None
) -> BaseCheckpointer:
    try:
        from ..log.postgres import PostgresCheckpointer
    except ImportError as exc:
        raise UsageError(
            f"PostgreSQL needs psycopg 3, which is not installed ({exc}): "
            "pip install 'agentlog[postgres]'"
        ) from None
    options: dict[str, Any] = {} if schema is None else {"schema": schema}
    return PostgresCheckpointer(
        location,
        tenant=tenant,
        create=False,
        read_only=not write,
        pool_min_size=1,
        pool_max_size=2,
        **options,
    )


_SCHEMA_IS_FOR_POSTGRES = (
    "--schema is for a PostgreSQL store (a postgresql:// URL or a libpq 'host=… dbname=…' string)"
)


def open_store(
    location: str,
    *,
    write: bool = False,
    tenant: str = DEFAULT_TENANT,
    schema: str | None = None,
) -> BaseCheckpointer:
    """The store at ``location``: a PostgreSQL URL or ``key=value`` string is
    PostgreSQL (in ``schema``), a directory a file store, anything else SQLite.

    Never creates one: a missing path, a directory that holds no file store,
    or a PostgreSQL schema that holds no store is an error. Without ``write``
    the store is opened read-only.
    """
    if is_postgres(location):
        return _open_postgres(location, write=write, tenant=tenant, schema=schema)
    if schema is not None:
        raise UsageError(_SCHEMA_IS_FOR_POSTGRES)
    if not os.path.lexists(location):
        raise UsageError(f"no such file or directory: {location}")
    if os.path.isdir(location):
        if not is_file_store(location):
            raise UsageError(
                f"{location} is a directory that holds no file store (no .agentlog.lock, "
                "no session files)"
            )
        if tenant != DEFAULT_TENANT:
            raise UsageError(
                f"{location} is a file store, which has no tenants (--tenant is for SQLite files)"
            )
        if write:
            return FileCheckpointer(location, create=False)
        return FileCheckpointer(location, read_only=True)
    if write:
        return SqliteCheckpointer(location, create=False, tenant=tenant)
    return SqliteCheckpointer(location, read_only=True, tenant=tenant)


@runtime_checkable
class Tenanted(Protocol):
    """A store with tenants: SQLite and PostgreSQL."""

    def list_all_tenants(self) -> list[tuple[str, SessionInfo]]: ...


@runtime_checkable
class _Operable(Tenanted, Protocol):
    """A database an operator runs stats and gc on: SQLite and PostgreSQL."""

    def stats(self) -> dict[str, Any]: ...

    def delete_idle(self, idle_for: float) -> list[str]: ...


@runtime_checkable
class Checkable(Protocol):
    """A store that checks itself (every kind agentlog opens)."""

    def check_integrity(
        self, deep: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> tuple[bool, str]: ...


def open_log(args: argparse.Namespace, *, write: bool = False) -> BaseCheckpointer:
    """The store a command names, with its tenant and schema."""
    return open_store(args.store, write=write, tenant=args.tenant, schema=args.schema)


def has_session(log: BaseCheckpointer, session: str) -> bool:
    """Whether ``session`` exists in ``log``."""
    # A head of 0 is an unknown session, or one truncated to nothing.
    return log.head(session) > 0 or any(info.id == session for info in log.list())


def require_session(
    log: BaseCheckpointer, args: argparse.Namespace, session: str | None = None
) -> int:
    """The head of ``session`` (default ``args.session``); an unknown session
    is an error that names the tenant holding it, if another one does."""
    session = args.session if session is None else session
    head = log.head(session)
    if head > 0 or has_session(log, session):
        return head
    where = shown(args.store)
    if args.tenant != DEFAULT_TENANT:
        where = f"tenant {args.tenant!r} of {where}"
    hint = "agentlog list shows them"
    if isinstance(log, Tenanted):
        others = sorted({t for t, info in log.list_all_tenants() if info.id == session})
        if others:
            hint = f"it is in tenant {others[0]!r}: add --tenant {shlex.quote(others[0])}"
    raise UsageError(f"no session {session!r} in {where} ({hint})")


def refuse_empty_tenant(log: Tenanted, args: argparse.Namespace) -> None:
    """A tenant given with ``--tenant`` that has no sessions, in a store whose
    other tenants have some, is most likely a typo: refused, naming the
    tenants there are. An empty default tenant is only noted on stderr."""
    others = sorted({tenant for tenant, _ in log.list_all_tenants()})
    if not others:
        return
    listed = ", ".join(repr(t) for t in others)
    message = (
        f"no sessions in tenant {args.tenant!r} of {shown(args.store)}"
        f" (its tenants: {listed}; add --tenant NAME, or --all-tenants)"
    )
    if args.tenant != DEFAULT_TENANT:
        raise UsageError(message)
    print(safe(f"agentlog list: note: {message}"), file=sys.stderr)


def _refuse_file_store(args: argparse.Namespace) -> None:
    """Operations commands work on a database: a directory is one line, exit 2."""
    if os.path.isdir(args.store):
        raise UsageError(
            f"{args.store} is a directory: this command works on a SQLite file or PostgreSQL"
        )
    if args.schema is not None and not is_postgres(args.store):
        raise UsageError(_SCHEMA_IS_FOR_POSTGRES)


def open_database(args: argparse.Namespace, *, write: bool) -> Any:
    """The SQLite file or PostgreSQL store ``args`` names (operations commands
    have no file-store form): a checkpointer with stats and gc."""
    _refuse_file_store(args)
    tenant = getattr(args, "tenant", DEFAULT_TENANT)
    log = open_store(args.store, write=write, tenant=tenant, schema=args.schema)
    assert isinstance(log, _Operable)
    return log


def open_storage(args: argparse.Namespace, *, write: bool) -> Any:
    """The four stores of the SQLite file or PostgreSQL store ``args`` names
    (an existing one only; read-only unless ``write``)."""
    if is_postgres(args.store):
        from ..storage.postgres import PostgresStorage

        schema = {} if args.schema is None else {"schema": args.schema}
        return PostgresStorage.open(args.store, create=False, read_only=not write, **schema)
    from ..storage import SqliteStorage

    _refuse_file_store(args)
    return SqliteStorage.open(args.store, read_only=not write, create=False)
