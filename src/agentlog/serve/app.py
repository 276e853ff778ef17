"""The viewer's web application: its pages, its JSON API and the live tails.

Starlette routes; every store call is blocking and runs on a worker thread;
a live tail is the async checkpointer's ``follow`` written out as
Server-Sent Events. The pages are static HTML shells with one script each:
the script fetches the API and builds the page with ``textContent`` only, so
no stored value is ever parsed as HTML.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import logging
import re
import secrets
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..errors import AgentlogError, SessionTruncatedError, StorageUnavailableError
from ..events import MAX_POSITION, RawEvent
from .lineage import lineage_tree
from .openapi import openapi_document
from .security import CSRF_HEADER, Guard, same_secret
from .source import MAX_PAGE, BadRequest, Source, UnknownTenant, check_id, event_frame

_LOG = logging.getLogger("agentlog.serve")

__all__ = [
    "HEARTBEAT_SECONDS",
    "LIST_POLL_SECONDS",
    "MAX_STREAMS",
    "TAIL_BYTES",
    "Stopping",
    "create_app",
]

#: The bytes of events a live tail queues for a slow client before it waits.
TAIL_BYTES = 4 << 20
#: Seconds between the comments that keep an idle live tail's connection open.
HEARTBEAT_SECONDS = 15.0
#: Seconds between looks at the sessions list for the live sessions page.
LIST_POLL_SECONDS = 0.5
#: The most live streams (list streams and tails) open at once; one more is a 503.
MAX_STREAMS = 64
#: The paths whose answers are live streams (they count against MAX_STREAMS).
_STREAM_PATH = re.compile(r"^/api/sessions/(stream|[^/]+/tail)$")
_STATIC_NAME = re.compile(r"^[A-Za-z0-9_-]+\.(js|css)$")

#: Each page: its script, and its title. One shell (page.html) holds them.
_PAGES = {
    "/": ("sessions", "Sessions"),
    "/session": ("session", "Session"),
    "/health": ("health", "Health"),
    "/stores": ("stores", "Stores"),
}
_STATIC_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".html": "text/html; charset=utf-8",
}


class Stopping:
    """Set when the server begins to stop. The live streams never end on
    their own, so each one ends when this is set: a stop does not wait for
    them, nor is a stream cancelled mid-write."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self) -> None:
        """Note the running loop (the app's startup calls this)."""
        self._loop = asyncio.get_running_loop()

    def set(self) -> None:
        """Stop the streams; safe from a signal handler or another thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.event.set)

    async def within(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True when the server is stopping."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.event.wait(), seconds)
        return self.event.is_set()


def _static(name: str) -> bytes:
    return importlib.resources.files(__package__).joinpath("static", name).read_bytes()


def _json(value: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(value), status_code=status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return _json({"error": message}, status)


def _int(request: Request, name: str, default: int | None, *, low: int = 0) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, not {raw[:40]!r}") from None
    if not low <= value <= MAX_POSITION:
        raise BadRequest(f"{name} must be between {low} and {MAX_POSITION}")
    return value


def _limit(request: Request, default: int) -> int:
    value = _int(request, "limit", default, low=1)
    assert value is not None
    return min(value, MAX_PAGE)


def _tenant(request: Request, source: Source) -> str:
    tenant = request.query_params.get("tenant") or source.tenant
    if len(tenant) > 255 or not tenant.isprintable():
        raise BadRequest("tenant is not a tenant name")
    return tenant


def _session_route(request: Request, source: Source) -> tuple[str, str]:
    """The tenant and the session id a session's route names, both checked."""
    return _tenant(request, source), check_id(request.path_params["session_id"])


def _session_json(found: object, tenant: str, session_id: str) -> Response:
    """``found`` as JSON, or a 404 naming the session when there is none."""
    if found is None:
        return _error(404, f"no session {session_id!r} in tenant {tenant!r}")
    return _json(found)


class _StreamCap:
    """ASGI middleware: at most ``limit`` live streams at once, a 503 beyond.

    Counted around the whole request, so a stream's slot is freed however it
    ends (a stop, a disconnect, an error)."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit, self.open = app, limit, 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not _STREAM_PATH.match(scope["path"]):
            await self.app(scope, receive, send)
            return
        if self.open >= self.limit:
            reply = _error(503, f"too many live streams (at most {self.limit}); try again later")
            reply.headers["retry-after"] = "5"
            await reply(scope, receive, send)
            return
        self.open += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.open -= 1


class _ListPoll:
    """One poll loop of the sessions list for one query, shared by every live
    list stream of that query: N identical streams cost one read per period."""

    def __init__(self, fetch: Callable[[], Any], stopping: Stopping) -> None:
        self.fetch, self.stopping = fetch, stopping
        self.data: bytes | None = None
        self.error: str | None = None
        self.version = 0
        self.subscribers = 0
        self.waiters: set[asyncio.Future[None]] = set()
        self.task: asyncio.Future[None] | None = None

    def _wake(self) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()

    async def run(self) -> None:
        try:
            while True:
                started = time.monotonic()
                data = orjson.dumps(await run_in_threadpool(self.fetch))
                # A list that is slow to read (a huge store) is looked at
                # less often: the viewer never spends most of its time on it.
                pause = max(LIST_POLL_SECONDS, 4 * (time.monotonic() - started))
                if data != self.data:
                    self.data, self.version = data, self.version + 1
                    self._wake()
                if await self.stopping.within(pause):
                    return
        except (AgentlogError, BadRequest) as exc:
            self.error = str(exc)
        finally:
            self.version += 1
            self.task = None
            self._wake()

    async def changed(self, seen: int, seconds: float) -> None:
        """Wait up to ``seconds`` for a version after ``seen`` (or the end)."""
        if self.version != seen or self.task is None:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.add(waiter)
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiter), seconds)
        finally:
            self.waiters.discard(waiter)


def _sse_head(event: str, event_id: bytes | None) -> bytes:
    """An SSE message up to its data (the data, then :data:`_SSE_END`, follow)."""
    head = b"" if event_id is None else b"id: " + event_id + b"\n"
    return head + b"event: " + event.encode() + b"\ndata: "


#: What ends an SSE message.
_SSE_END = b"\n\n"


def _sse(event: str, data: bytes, event_id: bytes | None = None) -> bytes:
    return _sse_head(event, event_id) + data + _SSE_END


def _tag(event: RawEvent) -> str:
    """What tells one stored event from another appended at the same seq after
    a truncate: its append time and stored bytes, as eight hex digits."""
    return f"{zlib.crc32(event.json, zlib.crc32(repr(event.ts).encode())):08x}"


def _event_id(event: RawEvent) -> bytes:
    """A tail event's SSE id, ``seq:tag``: a reconnect names it in
    ``Last-Event-ID``, and the tail checks the session still holds that event."""
    return f"{event.seq}:{_tag(event)}".encode()


#: A ``Last-Event-ID``: a seq, and the tag of the event there (an id of
#: an older viewer has no tag).
_RESUME = re.compile(r"(\d{1,20})(?::([0-9a-f]{8}))?")


def create_app(
    source: Source, stopping: Stopping | None = None, *, max_streams: int = MAX_STREAMS
) -> Starlette:
    """The viewer of ``source`` as an ASGI application (not yet guarded:
    :func:`guarded_app` adds the Host check, the token and the headers);
    its live streams end when ``stopping`` is set, and at most
    ``max_streams`` are open at once."""
    stopping = Stopping() if stopping is None else stopping
    csrf = secrets.token_urlsafe(32)
    polls: dict[tuple[str, int, str | None], _ListPoll] = {}

    def api(
        func: Callable[[Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def wrapped(request: Request) -> Response:
            try:
                return await func(request)
            except BadRequest as exc:
                return _error(404 if isinstance(exc, UnknownTenant) else 400, str(exc))
            except StorageUnavailableError as exc:
                # The server is down or unreachable: not the caller's, and its
                # details (hosts, users, ports) are for the server's log only.
                _LOG.warning("the store is unavailable: %s", exc)
                return _error(503, "the store is unavailable; see the viewer's log")
            except AgentlogError as exc:
                # A store's own refusal (a bad id, a missing record): the caller's.
                return _error(400 if isinstance(exc, ValueError) else 404, str(exc))

        return wrapped

    shell = _static("page.html").decode()
    shells = {
        path: shell.replace("{page}", name).replace("{title}", title).encode()
        for path, (name, title) in _PAGES.items()
    }

    async def page(request: Request) -> Response:
        return Response(shells[request.url.path], media_type=_STATIC_TYPES[".html"])

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if not _STATIC_NAME.match(name):  # no path, no NUL byte, no other kind
            raise HTTPException(404)
        kind = name[name.rfind(".") :]
        try:
            body = _static(name)
        except (FileNotFoundError, IsADirectoryError):
            raise HTTPException(404) from None
        return Response(body, media_type=_STATIC_TYPES[kind])

    @api
    async def config(request: Request) -> Response:
        tenants = await run_in_threadpool(source.tenants)
        return _json(
            {
                "store": source.location,
                "kind": source.kind,
                "tenant": source.tenant,
                "tenants": tenants,
                "allow_writes": source.allow_writes,
                "csrf": csrf if source.allow_writes else None,
                "has_stores": source.storage is not None,
            }
        )

    @api
    async def sessions(request: Request) -> Response:
        tenant = _tenant(request, source)
        found = await run_in_threadpool(
            source.sessions,
            tenant,
            cursor=request.query_params.get("cursor") or None,
            limit=_limit(request, 50),
            query=request.query_params.get("q") or None,
        )
        return _json(found)

    @api
    async def sessions_stream(request: Request) -> Response:
        tenant = _tenant(request, source)
        limit = _limit(request, 50)
        query = request.query_params.get("q") or None
        source.log(tenant)  # a bad tenant is refused before the stream starts

        key = (tenant, limit, query)

        async def stream() -> AsyncIterator[bytes]:
            poll = polls.get(key)
            if poll is None or poll.task is None:
                poll = polls[key] = _ListPoll(
                    lambda: source.sessions(tenant, cursor=None, limit=limit, query=query),
                    stopping,
                )
                poll.task = asyncio.ensure_future(poll.run())
            poll.subscribers += 1
            seen = 0
            try:
                while True:
                    await poll.changed(seen, HEARTBEAT_SECONDS)
                    if poll.version != seen:
                        seen = poll.version
                        if poll.task is None:  # the poll ended: a stop, or an error
                            if poll.error is not None:
                                yield _sse("error", orjson.dumps({"error": poll.error}))
                            return
                        assert poll.data is not None
                        yield _sse("sessions", poll.data)
                    elif poll.task is None:
                        return
                    else:
                        yield b": keep-alive\n\n"
            finally:
                poll.subscribers -= 1
                if poll.subscribers == 0:
                    if polls.get(key) is poll:
                        del polls[key]
                    if poll.task is not None:
                        poll.task.cancel()

        return _event_stream(stream())

    @api
    async def session(request: Request) -> Response:
        tenant, session_id = _session_route(request, source)
        found = await run_in_threadpool(source.session, tenant, session_id)
        return _session_json(found, tenant, session_id)

    @api
    async def events(request: Request) -> Response:
        tenant, session_id = _session_route(request, source)
        after = _int(request, "after", None)
        before = _int(request, "before", None, low=1)
        if after is not None and before is not None:
            raise BadRequest("give after or before, not both")
        found = await run_in_threadpool(
            source.events,
            tenant,
            session_id,
            after=after,
            before=before,
            limit=_limit(request, 200),
        )
        return Response(found, media_type="application/json")

    @api
    async def lineage(request: Request) -> Response:
        tenant, session_id = _session_route(request, source)
        found = await run_in_threadpool(lambda: lineage_tree(source.log(tenant), session_id))
        return _session_json(found, tenant, session_id)

    @api
    async def tail(request: Request) -> Response:
        tenant, session_id = _session_route(request, source)
        # A reconnect names the last event it had; a first connect, ?after=.
        last_id = request.headers.get("last-event-id")
        if last_id is not None:
            resume = _RESUME.fullmatch(last_id)
            if resume is None:  # never an id this viewer sent
                raise BadRequest("Last-Event-ID is not an event id of this viewer (seq:tag)")
            after, tag = min(int(resume[1]), MAX_POSITION), resume[2]
        else:
            after, tag = _int(request, "after", 0) or 0, None
        log = await run_in_threadpool(source.async_log, tenant)
        return _event_stream(_tail(log, session_id, after, tag, stopping))

    @api
    async def write(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in ("fork", "truncate"):
            raise BadRequest(f"no action {action[:40]!r}: POST fork or truncate")
        if not source.allow_writes:
            return _error(403, "this viewer is read-only (start it with --allow-writes)")
        if not same_secret(request.headers.get(CSRF_HEADER), csrf):
            return _error(403, "missing or wrong CSRF token")
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            return _error(403, "cross-site request refused")
        if request.headers.get("content-type", "").split(";")[0] != "application/json":
            return _error(415, "send the request as application/json")
        tenant, session_id = _session_route(request, source)
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            raise BadRequest("the body is not JSON") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        log = source.log(tenant)
        if action == "fork":
            at, new_id = body.get("at"), body.get("new_session_id")
            if not isinstance(at, int) or isinstance(at, bool) or not isinstance(new_id, str):
                raise BadRequest("fork takes {'at': seq, 'new_session_id': id}")
            new_id = check_id(new_id)
            if new_id == session_id:
                raise BadRequest("a session cannot be forked onto itself")
            current = await run_in_threadpool(log.head, session_id)
            if not 0 <= at <= current:
                raise BadRequest(f"at must be between 0 and the head, {current}")
            try:
                head = await run_in_threadpool(log.fork, session_id, at, new_id)
            except (ValueError, OverflowError) as exc:  # moved under us: the store's refusal
                raise BadRequest(str(exc)) from None
            return _json({"session_id": new_id, "head": head})
        to = body.get("to")
        if not isinstance(to, int) or isinstance(to, bool):
            raise BadRequest("truncate takes {'to': seq}")
        if not 0 <= to <= MAX_POSITION:
            raise BadRequest(f"to must be between 0 and {MAX_POSITION}")
        head = await run_in_threadpool(log.truncate, session_id, to)
        return _json({"session_id": session_id, "head": head})

    async def favicon(request: Request) -> Response:
        return Response(status_code=204)  # none: a browser's look for one is not a 404

    async def openapi(request: Request) -> Response:
        return _json(openapi_document())

    from .pages import store_routes

    routes = [
        *(Route(path, page) for path in _PAGES),
        Route("/static/{name}", static),
        Route("/favicon.ico", favicon),
        Route("/api/openapi.json", openapi),
        Route("/api/config", config),
        Route("/api/sessions", sessions),
        Route("/api/sessions/stream", sessions_stream),
        Route("/api/sessions/{session_id}", session),
        Route("/api/sessions/{session_id}/events", events),
        Route("/api/sessions/{session_id}/tail", tail),
        Route("/api/sessions/{session_id}/lineage", lineage),
        Route("/api/sessions/{session_id}/{action:str}", write, methods=["POST"]),
        *store_routes(source, api),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stopping.bind()
        try:
            yield
        finally:
            await run_in_threadpool(source.close)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        return _error(status, "no such page" if status == 404 else "method not allowed")

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={404: not_found, 405: not_found},
        middleware=[Middleware(_StreamCap, limit=max_streams)],
    )
    app.state.list_polls = polls  # each distinct list stream's one poll (tests look)
    return app


def _event_stream(body: AsyncIterator[bytes | memoryview]) -> StreamingResponse:
    return StreamingResponse(
        body,
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


@dataclass(frozen=True)
class _End:
    """The last message of a tail: why it ended."""

    kind: str
    data: dict[str, Any]


#: The most bytes of one event a tail hands the server in one write: the
#: server waits for the connection to drain before it takes the next, so a
#: slow client holds about this much in the transport, however large the
#: events are.
_WRITE_BYTES = 256 << 10


@dataclass(frozen=True)
class _Framed:
    """One event of a tail, framed as SSE in parts (see ``event_frame``): its
    stored bytes are ``body`` itself, never copied into a line."""

    head: bytes
    body: bytes
    tail: bytes

    @property
    def size(self) -> int:
        return len(self.body)


def _framed(session_id: str, event: RawEvent) -> _Framed:
    before, body, after = event_frame(session_id, event)
    return _Framed(_sse_head("event", _event_id(event)) + before, body, after + _SSE_END)


def _writes(items: list[_Framed]) -> Iterator[bytes | memoryview]:
    """The writes of ``items``, each at most about :data:`_WRITE_BYTES`: small
    events joined into one write, a large event's stored bytes sent in
    slices of themselves (memoryviews: no copy)."""
    pending: list[bytes] = []
    held = 0
    for item in items:
        for part in (item.head, item.body, item.tail):
            if len(part) <= _WRITE_BYTES - held:
                pending.append(part)
                held += len(part)
                continue
            if pending:
                yield b"".join(pending)
                pending, held = [], 0
            if len(part) <= _WRITE_BYTES:
                pending.append(part)
                held = len(part)
                continue
            view = memoryview(part)
            for at in range(0, len(part), _WRITE_BYTES):
                yield view[at : at + _WRITE_BYTES]
    if pending:
        yield b"".join(pending)


class _ByteQueue:
    """A tail's queue of events, bounded by their stored bytes: an event's
    bytes count from the pump's ``put`` until the writer has handed the last
    of them to the server (``sent``), and the pump waits while
    :data:`TAIL_BYTES` are held (one event always fits). So a slow client
    holds about the budget, or one event when an event is larger, and the
    pump reads no further event until there is room for it."""

    def __init__(self, budget: int | None = None) -> None:
        self.budget = TAIL_BYTES if budget is None else budget
        self.items: asyncio.Queue[_Framed | _End] = asyncio.Queue()
        self.size = 0
        self.room = asyncio.Event()

    async def wait_room(self, size: int) -> None:
        """Until ``size`` more bytes fit (at once when nothing is held)."""
        while self.size and self.size + size > self.budget:
            self.room.clear()
            await self.room.wait()

    async def put(self, item: _Framed | _End) -> None:
        size = item.size if isinstance(item, _Framed) else 0
        await self.wait_room(size)
        self.size += size
        self.items.put_nowait(item)

    def sent(self, size: int) -> None:
        """The writer has handed ``size`` bytes of taken events to the server."""
        self.size -= size
        self.room.set()

    async def get(self) -> _Framed | _End:
        return await self.items.get()

    def get_nowait(self) -> _Framed | _End:
        return self.items.get_nowait()

    def empty(self) -> bool:
        return self.items.empty()


async def _tail(
    log: Any,
    session_id: str,
    after: int,
    tag: str | None,
    stopping: Stopping,
    queue: _ByteQueue | None = None,
) -> AsyncIterator[bytes | memoryview]:
    """A session's events after ``after`` as SSE, then each one as it is
    committed; a truncate under the viewer is a ``truncated`` event, last
    (``rewritten`` when the session was appended to again past the viewer's
    seq, or when the event at ``after`` is not the one ``tag`` names: what
    it shows from some seq at or below that one is gone).

    The follower reads within the queue's budget (``follow_json``'s
    ``max_bytes``) and checks the resumed event itself (its ``expect``); the
    pump reads the next event only once the queue has room for one as large
    as the largest seen, and the queue frees an event's bytes only once they
    are written: with events larger than the budget, one is held at a time."""
    queue = _ByteQueue() if queue is None else queue

    async def truncated(seq: int, rewritten: bool) -> None:
        head = await log.head(session_id)
        await queue.put(_End("truncated", {"head": head, "seq": seq, "rewritten": rewritten}))

    def same(event: RawEvent) -> bool:
        return _tag(event) == tag

    async def pump() -> None:
        largest = 0
        try:
            follower = log.follow_json(
                session_id, after, max_bytes=queue.budget, expect=None if tag is None else same
            )
            async with contextlib.aclosing(follower):
                async for event in follower:
                    item = _framed(session_id, event)
                    del event
                    largest = max(largest, item.size)
                    await queue.put(item)
                    del item
                    # The next event may be the next read: only once it fits.
                    await queue.wait_room(largest)
        except SessionTruncatedError as exc:
            await truncated(exc.seq, exc.rewritten)
        except AgentlogError as exc:
            await queue.put(_End("error", {"error": str(exc)}))

    task = asyncio.ensure_future(pump())
    # A stop ends the tail between writes, never in the middle of one.
    stop = asyncio.ensure_future(stopping.event.wait())
    get: asyncio.Future[Any] | None = None
    try:
        yield b"retry: 1000\n\n"
        while True:
            # One getter at a time, kept across heartbeats: a getter left
            # waiting would take the next event and drop it.
            if get is None or get.done():
                get = asyncio.ensure_future(queue.get())
            await asyncio.wait(
                {get, stop}, timeout=HEARTBEAT_SECONDS, return_when="FIRST_COMPLETED"
            )
            if not get.done():
                if stop.done():
                    return
                yield b": keep-alive\n\n"
                continue
            item = get.result()
            # What else is queued goes out with it (a backlog, a catch-up
            # after a reconnect): small events joined into few writes.
            batch: list[_Framed] = []
            while isinstance(item, _Framed):
                batch.append(item)
                if queue.empty():
                    break
                item = queue.get_nowait()
            if batch:
                for write in _writes(batch):
                    yield write
                queue.sent(sum(framed.size for framed in batch))
                del batch
            if isinstance(item, _End):
                yield _sse(item.kind, orjson.dumps(item.data))
                return
            del item
    finally:
        for pending in (task, stop, get):
            if pending is not None:
                pending.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


def guarded_app(
    source: Source,
    *,
    token: str,
    loopback: bool = True,
    stopping: Stopping | None = None,
    max_streams: int = MAX_STREAMS,
) -> Guard:
    """:func:`create_app`, behind the :class:`~agentlog.serve.security.Guard`
    (``loopback``: the bind is, so the Host header is checked too)."""
    app = create_app(source, stopping, max_streams=max_streams)
    return Guard(app, token=token, loopback=loopback)
