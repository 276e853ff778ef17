"""``agentlog serve STORE``: the local web viewer (``agentlog[serve]``)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..locations import is_postgres, shown
from .opening import open_storage, open_store
from .output import UsageError, safe

__all__ = ["cmd_serve", "viewer_source"]


def viewer_source(args: argparse.Namespace) -> Any:
    """The :class:`agentlog.serve.Source` of the store ``args`` names (its
    ``store``, ``tenant``, ``schema`` and ``allow_writes``), opened now: a
    store that is missing, or is not one, is the user's mistake, reported
    before anything listens."""
    try:
        from ..serve import Source
    except ImportError as exc:
        raise UsageError(
            f"the viewer needs Starlette and uvicorn, which are not installed ({exc}): "
            "pip install 'agentlog[serve]'"
        ) from None
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
