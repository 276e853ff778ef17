"""The API of the stores page and the health page (the four ADR-004 stores, checks)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import orjson
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from .. import engine_info
from .source import MAX_PAGE, BadRequest, Source
from .telemetry import health_figures, metrics_routes

__all__ = ["store_routes"]

Handler = Callable[[Request], Awaitable[Response]]


def _json(value: Any) -> Response:
    return Response(orjson.dumps(value), media_type="application/json")


def _record(value: Any) -> Any:
    """A store's record (a dataclass) as JSON-ready values."""
    return dataclasses.asdict(value)


def _page(request: Request) -> tuple[str | None, int]:
    raw = request.query_params.get("limit", "100")
    # Checked by length before int(): thousands of digits would raise in int().
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 6) or not 1 <= int(raw) <= MAX_PAGE:
        raise BadRequest(f"limit must be a whole number from 1 to {MAX_PAGE}")
    return request.query_params.get("after") or None, int(raw)


def _attachment(name: str) -> str:
    """A Content-Disposition that saves the bytes under a safe form of ``name``:
    letters, digits, ``.``, ``-`` and ``_`` only (no quote, no path, no
    leading dot), at most 100 characters; ``artifact.bin`` when none is left."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip("._")[:100] or "artifact.bin"
    return f'attachment; filename="{safe}"'


def store_routes(source: Source, api: Callable[[Handler], Handler]) -> list[Route]:
    """The routes of ``/api/stores/...`` and ``/api/health``."""

    def stores() -> Any:
        found = source.stores()
        if found is None:
            raise BadRequest("a file store has no checkpoint, memory or artifact stores")
        return found

    def tenant(request: Request) -> str:
        return request.query_params.get("tenant") or source.tenant

    @api
    async def checkpoints(request: Request) -> Response:
        after, limit = _page(request)
        session_id = request.query_params.get("session_id") or None
        rows = await run_in_threadpool(
            lambda: stores().checkpoints.list(
                tenant(request), session_id=session_id, after=after, limit=limit
            )
        )
        return _json({"checkpoints": [_record(r) for r in rows]})

    @api
    async def memory(request: Request) -> Response:
        after, limit = _page(request)
        namespace = request.query_params.get("namespace")
        if not namespace:
            raise BadRequest("memory needs ?namespace=")
        rows = await run_in_threadpool(
            lambda: stores().memory.list(tenant(request), namespace, after=after, limit=limit)
        )
        return _json({"records": [_record(r) for r in rows]})

    def id_ordered(store: str, key: str) -> Handler:
        """The handler listing one store's records of a tenant in id order."""

        async def listed(request: Request) -> Response:
            after, limit = _page(request)
            rows = await run_in_threadpool(
                lambda: getattr(stores(), store).list(tenant(request), after=after, limit=limit)
            )
            return _json({key: [_record(r) for r in rows]})

        return api(listed)

    @api
    async def download(request: Request) -> Response:
        artifact_id = request.path_params["artifact_id"]
        reader = await run_in_threadpool(
            lambda: stores().artifacts.open(tenant(request), artifact_id)
        )
        info = reader.info

        def chunks() -> Iterator[bytes]:
            # The reader checks the sha256 after the last byte: a mismatch
            # raises, which cuts the download short instead of ending it.
            with reader:
                while chunk := reader.read(1 << 16):
                    yield chunk

        # Never rendered: any stored media type (HTML, SVG) is sent as bytes to save.
        return StreamingResponse(
            iterate_in_threadpool(chunks()),
            media_type="application/octet-stream",
            headers={
                "content-disposition": _attachment(artifact_id),
                "content-length": str(info.size),
                "x-agentlog-sha256": info.sha256,
            },
        )

    @api
    async def session_snapshot(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        # The snapshot without a single item (limit=0): the items after it are
        # counted from the record (they are contiguous, head - through), never
        # loaded, so a session of many large items costs no more than its row.
        loaded = await run_in_threadpool(
            lambda: stores().sessions.load(tenant(request), session_id, limit=0)
        )
        snapshot = loaded.snapshot
        through = 0 if snapshot is None else snapshot.through_sequence
        return _json(
            {
                "session": _record(loaded.session),
                "snapshot": None if snapshot is None else _record(snapshot),
                "items_after_snapshot": loaded.session.head - through,
            }
        )

    @api
    async def health(request: Request) -> Response:
        deep = request.query_params.get("deep") in ("1", "true")

        def look() -> dict[str, Any]:
            log: Any = source.log(source.tenant)  # every kind agentlog opens checks itself
            ok, detail = log.check_integrity(deep=deep)
            stats = getattr(log, "stats", None)
            found = None if stats is None else stats()
            info = engine_info()
            return {
                "store": source.location,
                "kind": source.kind,
                "engine": {
                    "engine": info["engine"],
                    "sqlite_version": info["sqlite_version"],
                    "available": info["available"],
                },
                "schema_version": None if found is None else found.get("schema_version"),
                "check": {"deep": deep, "ok": ok, "detail": detail},
                "stats": found,
                "telemetry": health_figures(log),
            }

        return _json(await run_in_threadpool(look))

    return [
        Route("/api/stores/checkpoints", checkpoints),
        Route("/api/stores/memory", memory),
        Route("/api/stores/artifacts", id_ordered("artifacts", "artifacts")),
        Route("/api/stores/artifacts/{artifact_id}/download", download),
        Route("/api/stores/sessions", id_ordered("sessions", "sessions")),
        Route("/api/stores/sessions/{session_id}", session_snapshot),
        Route("/api/health", health),
        *metrics_routes(),
    ]
