"""``agentlog serve STORE``: the local web viewer (``agentlog[serve]``)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..locations import is_postgres, shown
from .opening import open_storage, open_store
from .output import UsageError, safe

__all__ = ["cmd_serve", "stored_schema", "viewer_source"]


def stored_schema(store: str, *, tenant: str, schema: str | None) -> tuple[int, int] | None:
    """The schema version of the SQLite file or PostgreSQL schema at ``store``
    and the one this agentlog writes, read without changing anything (None:
    a file store, which has no schema to upgrade)."""
    if is_postgres(store):
        log = open_store(store, write=False, tenant=tenant, schema=schema)
        try:
            from ..engine.postgres import SCHEMA_VERSION as POSTGRES_VERSION
            from ..log.postgres import PostgresCheckpointer

            assert isinstance(log, PostgresCheckpointer)
            return log.database.schema_version, POSTGRES_VERSION
        finally:
            log.close()
    open_store(store, write=False, tenant=tenant, schema=schema).close()  # its own refusals
    if os.path.isdir(store):
        return None
    from ..engine import open_database
    from ..engine.schema import SCHEMA_VERSION

    engine = open_database(store, read_only=True)
    try:
        return engine.schema_version, SCHEMA_VERSION
    finally:
        engine.close()


def _check_upgrade(args: argparse.Namespace) -> str | None:
    """Refuse ``--allow-writes`` on a store of an older schema, which a
    writable open would upgrade in place (after which older agentlog versions
    cannot open it), unless ``--upgrade`` says to; the note to print when it
    does. A read-only viewer never upgrades: ``--upgrade`` without
    ``--allow-writes`` is a mistake."""
    upgrade = bool(getattr(args, "upgrade", False))
    if not args.allow_writes:
        if upgrade:
            raise UsageError(
                "--upgrade is for --allow-writes: a read-only viewer never changes the store"
            )
        return None
    versions = stored_schema(args.store, tenant=args.tenant, schema=args.schema)
    if versions is None or versions[0] >= versions[1]:
        return None
    found, current = versions
    where = shown(args.store)
    if not upgrade:
        raise UsageError(
            f"{where} has schema version {found}, older than this agentlog's {current}: "
            "--allow-writes would upgrade it in place, after which older agentlog versions "
            "cannot open it; add --upgrade to upgrade it, or serve it without --allow-writes"
        )
    return (
        f"agentlog serve: upgraded {where} from schema version {found} to {current} "
        "(older agentlog versions cannot open it now)"
    )


def viewer_source(args: argparse.Namespace) -> Any:
    """The :class:`agentlog.serve.Source` of the store ``args`` names (its
    ``store``, ``tenant``, ``schema`` and ``allow_writes``), opened now: a
    store that is missing, or is not one, is the user's mistake, reported
    before anything listens.

    With ``allow_writes``, a store of an older schema is refused unless
    ``args.upgrade`` (then the writable open upgrades it, in one
    transaction); without, the store is opened read-only and never upgraded."""
    try:
        from ..serve import Source
    except ImportError as exc:
        raise UsageError(
            f"the viewer needs Starlette and uvicorn, which are not installed ({exc}): "
            "pip install 'agentlog[serve]'"
        ) from None
    upgraded = _check_upgrade(args)
    write = bool(args.allow_writes)
    if is_postgres(args.store):
        kind = "postgres"
    else:
        kind = "files" if os.path.isdir(args.store) else "sqlite"

    opened: list[Any] = []

    def opener(tenant: str) -> Any:
        if kind == "postgres" and opened:
            # Every tenant on the first one's pool: a tenant is a column, and
            # a pool each would take connections per tenant from the server.
            from ..log.postgres import PostgresCheckpointer

            return PostgresCheckpointer.on_database(opened[0].database, tenant)
        return open_store(args.store, write=write, tenant=tenant, schema=args.schema)

    first = opener(args.tenant)
    opened.append(first)
    storage = None if kind == "files" else (lambda: open_storage(args, write=False))
    source = Source(
        open=opener,
        location=shown(args.store),
        kind=kind,
        tenant=args.tenant,
        allow_writes=write,
        storage=storage,
    )
    source.keep(args.tenant, first)
    if upgraded is not None:
        print(safe(upgraded), file=sys.stderr, flush=True)
    return source


def cmd_serve(args: argparse.Namespace) -> None:
    """Serve the store's sessions to a browser until interrupted."""
    if args.metrics:
        try:
            from ..telemetry.prometheus import enable
        except ImportError as exc:
            raise UsageError(
                f"--metrics needs the prometheus extra (pip install 'agentlog[prometheus]'): {exc}"
            ) from None
        enable()
    source = viewer_source(args)
    from ..serve import run

    try:
        run(
            source,
            host=args.host,
            port=args.port,
            open_browser=args.open,
            say=lambda line: print(safe(line), file=sys.stderr, flush=True),
        )
    except OSError as exc:  # the port is taken, the address is not this machine's
        source.close()
        raise UsageError(
            f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}"
        ) from None
