"""OpenTelemetry traces and metrics for agentlog, switched on explicitly.

Needs ``pip install "agentlog[otel]"`` (``opentelemetry-api``; the SDK and
its exporters are the host's choice). Nothing here runs until
:func:`instrument` is called: then the public operations of the log's
backends and their async twins are wrapped (as OpenTelemetry's instrumentor
packages wrap a library's), and :func:`uninstrument` puts them back. Off,
the hot path is the one without this package.

Spans follow OpenTelemetry's database conventions: kind CLIENT, named after
the operation (``append``, ``read``, ``fork`` …), with ``db.system.name``
(``sqlite``, ``postgresql``; ``agentlog.memory``, ``agentlog.file`` for the
others) and ``db.operation.name``; ``error.type`` on a failure. The session
and the tenant (which may be personal data) are attributes only with
``record_ids=True``. ``agentlog.outcome`` says how an operation ended: ``ok``,
``repeat`` (an idempotent append whose key was stored: nothing written),
``conflict`` (an expected head or revision that did not match),
``outcome_unknown`` (the connection was lost around the commit) or ``error``.
An awaited append's span lasts until its commit group is committed; a write
the async writer thread runs is run in its caller's context, and a group of
appends that thread writes is a span (``commit group``) whose parent is the
first append's and which links every append of the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import importlib
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from .. import engine as engine_module
from .. import events as events_module
from ..aio.checkpointer import AsyncBaseCheckpointer
from ..aio.face import AsyncLogFace
from ..aio.writer import Job, LoopChannel, Writer
from ..errors import (
    CheckpointConflictError,
    IdempotencyKeyError,
    OutcomeUnknownError,
    StorageConflictError,
)
from ..events import AppendKey, EncodedBatch, SessionEvent
from ..log import base as base_module
from ..log import follow as follow_module
from ..log.base import BaseCheckpointer
from ..log.file import FileCheckpointer
from ..log.sqlite import SqliteCheckpointer
from ..stores.artifacts import ArtifactStore
from ..stores.checkpoints import CheckpointStore
from ..stores.memories import MemoryStore
from ..stores.sessions import SessionStore

if TYPE_CHECKING:
    from ..log.postgres import PostgresCheckpointer


def _postgres_modules() -> tuple[ModuleType, ModuleType] | None:
    """agentlog's PostgreSQL modules (sync, async), or None without the postgres extra."""
    try:
        from ..aio import postgres as aio_postgres
        from ..log import postgres as log_postgres
    except ImportError:
        return None
    return log_postgres, aio_postgres


_POSTGRES = _postgres_modules()


def _c_engine() -> ModuleType | None:
    """The C engine's module, where it is built."""
    if "c" not in engine_module.AVAILABLE_ENGINES:
        return None
    return importlib.import_module("agentlog.engine.cengine")


_CENGINE = _c_engine()
#: The classes instrumented, PostgreSQL's where its extra is installed.
_PG_SYNC: tuple[type, ...] = () if _POSTGRES is None else (_POSTGRES[0].PostgresCheckpointer,)
_PG_ASYNC: tuple[type, ...] = () if _POSTGRES is None else (_POSTGRES[1].AsyncPostgresCheckpointer,)
_ASYNC_CLASSES: tuple[type, ...] = (AsyncBaseCheckpointer, *_PG_ASYNC)

__all__ = ["SCOPE", "instrument", "instrumented", "uninstrument"]

#: The instrumentation scope's name (the tracer's and the meter's).
SCOPE = "agentlog"

_log = logging.getLogger("agentlog.telemetry")

#: Seconds: the buckets of the duration histograms (OpenTelemetry's advice
#: for database client operations, down to 100 µs: appends are fast).
_DURATION_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
_GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
#: Events: the buckets of a follower's lag behind its session's head.
_LAG_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536)


class _Op:
    """What one instrumented operation learns while it runs (from the seams)."""

    __slots__ = ("appended_bytes", "appended_events", "handles", "repeat")

    def __init__(self) -> None:
        self.appended_events = 0
        self.appended_bytes = 0
        self.repeat = False
        #: The C engine's handles of the appends its writer thread wrote for it.
        self.handles: list[Any] = []


#: The instrumented operation under way in this context, if any: an inner one
#: (an async twin's write run by its sync backend) is counted once, as the outer.
_CURRENT: contextvars.ContextVar[_Op | None] = contextvars.ContextVar(
    "agentlog.telemetry.operation", default=None
)


def _system(target: object) -> str:
    if isinstance(target, (SqliteCheckpointer, AsyncBaseCheckpointer)):
        backend = target.backend if isinstance(target, AsyncBaseCheckpointer) else target
        if isinstance(backend, SqliteCheckpointer):
            return "sqlite"
        if isinstance(backend, _PG_SYNC):
            return "postgresql"
        return "agentlog." + type(backend).__name__.removesuffix("Checkpointer").lower()
    if isinstance(target, (*_PG_SYNC, *_PG_ASYNC)):
        return "postgresql"
    return "agentlog." + type(target).__name__.removesuffix("Checkpointer").lower()


def _outcome(exc: BaseException | None, op: _Op) -> str:
    if exc is None:
        return "repeat" if op.repeat else "ok"
    if isinstance(exc, (CheckpointConflictError, StorageConflictError, IdempotencyKeyError)):
        return "conflict"
    if isinstance(exc, OutcomeUnknownError):
        return "outcome_unknown"
    return "error"


class _Telemetry:
    """The instruments, once per :func:`instrument`."""

    def __init__(
        self,
        tracer: Tracer,
        meter: Meter,
        *,
        record_ids: bool,
        slow_threshold: float | None,
    ) -> None:
        self.tracer = tracer
        self.record_ids = record_ids
        self.slow_threshold = slow_threshold
        self.duration = meter.create_histogram(
            "db.client.operation.duration",
            unit="s",
            description="Duration of agentlog's operations (appends include their group commit).",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.events_appended = meter.create_counter(
            "agentlog.events.appended", unit="{event}", description="Events appended."
        )
        self.bytes_appended = meter.create_counter(
            "agentlog.events.appended.size", unit="By", description="Bytes of event JSON appended."
        )
        self.events_read = meter.create_counter(
            "agentlog.events.read", unit="{event}", description="Events read."
        )
        self.conflicts = meter.create_counter(
            "agentlog.conflicts",
            unit="{conflict}",
            description="Writes refused for an expected head or revision that did not match.",
        )
        self.damaged_checks = meter.create_counter(
            "agentlog.check.damaged",
            unit="{check}",
            description="Integrity checks (check_integrity, agentlog check) that found damage.",
        )
        self.follow_lag = meter.create_histogram(
            "agentlog.follow.lag",
            unit="s",
            description="How long after its append a follower yielded each event.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.follow_lag_events = meter.create_histogram(
            "agentlog.follow.lag.events",
            unit="{event}",
            description="How many events a follower's session held past each event it yielded.",
            explicit_bucket_boundaries_advisory=_LAG_BUCKETS,
        )
        self.group_size = meter.create_histogram(
            "agentlog.commit_group.size",
            unit="{append}",
            description="Appends per group the async writer thread commits together.",
            explicit_bucket_boundaries_advisory=_GROUP_BUCKETS,
        )
        # Each object an operation touched, by id: a weak reference, its system.
        self._noted: dict[int, tuple[weakref.ref[Any], str]] = {}
        # Attribute sets, each made once (see labels).
        self._labels: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        # Live objects the gauges read (weakly: telemetry keeps nothing open).
        self.writers: weakref.WeakSet[Writer] = weakref.WeakSet()
        self.sqlite: weakref.WeakSet[SqliteCheckpointer] = weakref.WeakSet()
        self.postgres: weakref.WeakSet[PostgresCheckpointer] = weakref.WeakSet()
        meter.create_observable_gauge(
            "agentlog.writer.queue_depth",
            [self._queue_depth],
            unit="{job}",
            description="Writes waiting for the async writer thread.",
        )
        meter.create_observable_gauge(
            "agentlog.sqlite.wal.size",
            [self._sqlite_figure("wal_bytes")],
            unit="By",
            description="Size of the write-ahead log.",
        )
        meter.create_observable_counter(
            "agentlog.sqlite.wal.bounds_hit",
            [self._sqlite_figure("wal_bounds_hit")],
            unit="{look}",
            description="Looks that found the WAL past its bound.",
        )
        meter.create_observable_counter(
            "agentlog.sqlite.wal.checkpoints",
            [self._sqlite_figure("wal_truncations")],
            unit="{checkpoint}",
            description="Checkpoints that truncated the WAL at its bound.",
        )
        meter.create_observable_counter(
            "agentlog.sqlite.readers.opened",
            [self._sqlite_figure("readers_opened")],
            unit="{connection}",
            description="Reads that found no idle reader and opened one.",
        )
        meter.create_observable_gauge(
            "agentlog.postgres.pool.connections",
            [self._pool_figure],
            unit="{connection}",
            description="PostgreSQL pool connections, by state (idle, used, waiting).",
        )
        meter.create_observable_counter(
            "agentlog.postgres.retries",
            [self._retries],
            unit="{retry}",
            description="Reads tried again after a lost connection.",
        )

    # -- gauges ---------------------------------------------------------------------

    def _queue_depth(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(sum(writer.pending for writer in list(self.writers)))]

    def _sqlite_figure(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            total = 0
            for log in list(self.sqlite):
                if log.closed:
                    continue
                with contextlib.suppress(Exception):  # closed meanwhile
                    total += log.figures()[name]
            return [Observation(total)]

        return observe

    def _pool_figure(self, options: CallbackOptions) -> Iterable[Observation]:
        seen = []
        for log in list(self.postgres):
            if log.closed:
                continue
            stats = log.database.pool.get_stats()
            size, idle = stats.get("pool_size", 0), stats.get("pool_available", 0)
            where = {"db.namespace": log.schema}
            seen.append(Observation(idle, {**where, "state": "idle"}))
            seen.append(Observation(size - idle, {**where, "state": "used"}))
            seen.append(
                Observation(stats.get("requests_waiting", 0), {**where, "state": "waiting"})
            )
        return seen

    def _retries(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(log.database.retries, {"db.namespace": log.schema})
            for log in list(self.postgres)
        ]

    # -- operations ----------------------------------------------------------------

    def note(self, target: Any) -> str:
        """Remember ``target`` for the gauges (once); its ``db.system.name``."""
        key = id(target)
        known = self._noted.get(key)
        if known is not None:
            return known[1]
        if isinstance(target, SqliteCheckpointer):
            self.sqlite.add(target)
        elif isinstance(target, _PG_SYNC):
            self.postgres.add(target)  # type: ignore[arg-type]
        elif isinstance(target, _ASYNC_CLASSES):
            self.note(target.backend)  # type: ignore[attr-defined]
        system = _system(target)
        noted = self._noted

        def forget(_: object) -> None:  # when the object goes, before its id is another's
            noted.pop(key, None)

        with contextlib.suppress(TypeError):  # not weakly referable: looked at each time
            noted[key] = (weakref.ref(target, forget), system)
        return system

    def labels(self, *pairs: tuple[str, str]) -> dict[str, str]:
        """The attributes ``pairs`` as one dict, made once (never to be changed)."""
        found = self._labels.get(pairs)
        if found is None:
            found = self._labels[pairs] = dict(pairs)
        return found

    def start(self, name: str, target: Any, session_id: object) -> tuple[Span, dict[str, str]]:
        system = self.note(target)
        attributes = self.labels(("db.system.name", system), ("db.operation.name", name))
        span_attributes: dict[str, Any] = attributes
        if self.record_ids and session_id is not None:
            span_attributes = dict(attributes)
            span_attributes["agentlog.session.id"] = str(session_id)
            owner = getattr(target, "backend", target)  # an async twin: its backend's tenant
            span_attributes["agentlog.tenant"] = str(getattr(owner, "tenant", ""))
        span = self.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=span_attributes)
        return span, attributes

    def finish(
        self,
        span: Span,
        attributes: dict[str, str],
        started: float,
        op: _Op,
        exc: BaseException | None,
        read: int = 0,
    ) -> None:
        elapsed = time.perf_counter() - started
        outcome = _outcome(exc, op)
        ended: dict[str, Any] = {"agentlog.outcome": outcome}
        if exc is not None:
            error_type = ended["error.type"] = _failed(span, exc)
            labels = self.labels(
                *attributes.items(), ("agentlog.outcome", outcome), ("error.type", error_type)
            )
            if outcome == "conflict":
                self.conflicts.add(1, attributes)
        else:
            labels = self.labels(*attributes.items(), ("agentlog.outcome", outcome))
            if op.appended_events and not op.repeat:
                self.events_appended.add(op.appended_events, attributes)
                self.bytes_appended.add(op.appended_bytes, attributes)
                ended["agentlog.events"] = op.appended_events
        if read:
            self.events_read.add(read, attributes)
            ended["agentlog.events"] = read
        span.set_attributes(ended)
        for handle in op.handles:
            self.c_group(span, handle.commit_group)
        self.duration.record(elapsed, labels)
        span.end()
        if self.slow_threshold is not None and elapsed > self.slow_threshold:
            _log.warning(
                "slow %s on %s: %.1f ms (threshold %.1f ms), %s",
                attributes["db.operation.name"],
                attributes["db.system.name"],
                elapsed * 1000,
                self.slow_threshold * 1000,
                outcome,
            )

    def c_group(self, span: Span, group: tuple[int, int, int, int] | None) -> None:
        """The C engine writer thread's group of one append (None: it wrote none):
        counted once, by its first append; a ``commit group`` child of the
        append's span, its times the thread's."""
        if group is None:
            return
        size, index, started, ended = group
        if index == 0:
            self.group_size.record(size)
        if span.is_recording():
            child = self.tracer.start_span(
                "commit group",
                context=trace.set_span_in_context(span),
                kind=SpanKind.INTERNAL,
                attributes={"agentlog.group.size": size},
                start_time=started,
            )
            child.end(end_time=ended)

    @contextlib.contextmanager
    def group(self, jobs: list[Job]) -> Iterator[None]:
        """The writer thread's span of one commit group (see :attr:`Writer.observer`)."""
        contexts = [job.context.run(_span_context) for job in jobs if job.context is not None]
        links = [Link(context) for context in contexts if context.is_valid]
        parent = None
        first = next((job.context for job in jobs if job.context is not None), None)
        if first is not None:
            parent = first.run(trace.get_current_span)
        context = None if parent is None else trace.set_span_in_context(parent)
        self.group_size.record(len(jobs))
        with self.tracer.start_as_current_span(
            "commit group",
            context=context,
            kind=SpanKind.INTERNAL,
            links=links,
            attributes={"agentlog.group.size": len(jobs)},
        ):
            yield


def _span_context() -> trace.SpanContext:
    return trace.get_current_span().get_span_context()


_state: _Telemetry | None = None
_patches: list[tuple[object, str, object]] = []


def instrumented() -> bool:
    """Whether :func:`instrument` is in force."""
    return _state is not None


def instrument(
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    *,
    record_ids: bool = False,
    slow_threshold: float | None = None,
) -> None:
    """Trace and measure agentlog's operations, until :func:`uninstrument`.

    ``tracer_provider`` and ``meter_provider`` default to OpenTelemetry's
    global ones. ``record_ids`` puts the session id and the tenant on each
    span (they may be personal data: off by default; metrics never carry
    them). ``slow_threshold`` (seconds): an operation slower than that is
    logged as a warning by the ``agentlog.telemetry`` logger. Called again,
    it replaces the earlier instrumentation.
    """
    global _state
    uninstrument()
    if slow_threshold is not None and not slow_threshold >= 0:
        raise ValueError(f"slow_threshold must be a number of seconds >= 0, not {slow_threshold!r}")
    tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
    meter = (meter_provider or metrics.get_meter_provider()).get_meter(SCOPE)
    state = _Telemetry(tracer, meter, record_ids=record_ids, slow_threshold=slow_threshold)
    for name in ("append", "fork", "truncate", "delete", "set_metadata"):
        _patch(BaseCheckpointer, name, _sync_operation(state, name))
    for name in ("read", "read_json"):
        _patch(BaseCheckpointer, name, _sync_read(state, name))
    for store, collection, writes, reads in _STORE_OPERATIONS:
        for name in (*writes, *reads):
            _patch(store, name, _store_operation(state, store, collection, name))
    for cls in (SqliteCheckpointer, FileCheckpointer, *_PG_SYNC):
        _patch(cls, "check_integrity", _checking(state, vars(cls)["check_integrity"]))
    _patch(BaseCheckpointer, "follow", _following(state, BaseCheckpointer.follow))
    for name in ("follow", "follow_json"):
        _patch(AsyncLogFace, name, _async_following(state, vars(AsyncLogFace)[name]))
    _patch(AsyncLogFace, "append", _async_operation(state, "append"))
    for cls in _ASYNC_CLASSES:
        for name in ("fork", "truncate", "delete", "set_metadata"):
            _patch(cls, name, _async_operation(state, name))
        for name in ("read", "read_json"):
            _patch(cls, name, _async_read(state, name))
    for module in (base_module, *_POSTGRES[1:2]) if _POSTGRES else (base_module,):
        _patch(module, "encode_events", _counting_encode(events_module.encode_events))
        _patch(module, "anchored_page", _noting_head(follow_module.anchored_page))
    _patch(AppendKey, "replay", _noting_replay(AppendKey.replay))
    _patch(Writer, "submit", _noting_submit(state, Writer.submit))
    _patch(Job, "__init__", _capturing_job(Job.__init__))
    _patch(Writer, "observer", state.group)
    _patch(LoopChannel, "queue", _noting_queued(LoopChannel.queue))
    if _CENGINE is not None:
        _CENGINE.observe_commit_groups(_note_handle)
    _state = state


def uninstrument() -> None:
    """Undo :func:`instrument`: the operations are agentlog's own again."""
    global _state
    while _patches:
        owner, name, original = _patches.pop()
        setattr(owner, name, original)
    if _CENGINE is not None:
        _CENGINE.observe_commit_groups(None)
    _state = None


def _patch(owner: object, name: str, replacement: object) -> None:
    _patches.append(
        (owner, name, vars(owner)[name] if isinstance(owner, type) else getattr(owner, name))
    )
    setattr(owner, name, replacement)


# -- the seams ------------------------------------------------------------------------


def _counting_encode(
    encode: Callable[[Iterable[SessionEvent]], EncodedBatch],
) -> Callable[[Iterable[SessionEvent]], EncodedBatch]:
    @functools.wraps(encode)
    def encode_events(events: Iterable[SessionEvent]) -> EncodedBatch:
        batch = encode(events)
        op = _CURRENT.get()
        if op is not None:
            op.appended_events += len(batch)
            op.appended_bytes += sum(len(data) for _, data in batch)
        return batch

    return encode_events


def _noting_replay(replay: Callable[..., int]) -> Callable[..., int]:
    @functools.wraps(replay)
    def noted(self: AppendKey, session_id: str, digest: bytes, head: int) -> int:
        op = _CURRENT.get()
        if op is not None:
            op.repeat = True
        return replay(self, session_id, digest, head)

    return noted


def _note_handle(handle: object) -> None:
    """The C engine's observer: its writer thread wrote ``handle`` (a thread's append)."""
    op = _CURRENT.get()
    if op is not None:
        op.handles.append(handle)


def _noting_queued(queue: Callable[..., object]) -> Callable[..., object]:
    @functools.wraps(queue)
    def noted(self: LoopChannel, *args: Any) -> object:
        handle = queue(self, *args)  # an event loop's append, for the C writer thread
        _note_handle(handle)
        return handle

    return noted


def _noting_submit(state: _Telemetry, submit: Callable[[Writer, Job], None]) -> Callable[..., None]:
    @functools.wraps(submit)
    def noted(self: Writer, job: Job) -> None:
        state.writers.add(self)
        submit(self, job)

    return noted


def _capturing_job(init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(init)
    def captured(self: Job, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.context = contextvars.copy_context()  # the caller's: its span, its operation

    return captured


# -- the wrappers ---------------------------------------------------------------------


def _sync_operation(state: _Telemetry, name: str) -> Callable[..., Any]:
    original = getattr(BaseCheckpointer, name)

    @functools.wraps(original)
    def operation(self: BaseCheckpointer, session_id: str, *args: Any, **kwargs: Any) -> Any:
        if _CURRENT.get() is not None:  # inside an instrumented operation: counted there
            return original(self, session_id, *args, **kwargs)
        op = _Op()
        token = _CURRENT.set(op)
        span, attributes = state.start(name, self, session_id)
        started = time.perf_counter()
        try:
            current = otel_context.attach(trace.set_span_in_context(span))
            try:
                result = original(self, session_id, *args, **kwargs)
            finally:
                otel_context.detach(current)
        except BaseException as exc:
            state.finish(span, attributes, started, op, exc)
            raise
        finally:
            _CURRENT.reset(token)
        state.finish(span, attributes, started, op, None)
        return result

    return operation


class _Follower:
    """One follower: its span (open while it follows), the head its last look saw."""

    __slots__ = ("attributes", "delivered", "head", "span")

    def __init__(self, state: _Telemetry, target: Any, session_id: object) -> None:
        self.span, attributes = state.start("follow", target, session_id)
        self.attributes = {"db.system.name": attributes["db.system.name"]}
        self.head = 0
        self.delivered = 0

    def deliver(self, state: _Telemetry, event: Any) -> None:
        """Record how far behind the head (events) and the clock (seconds) ``event`` came."""
        self.delivered += 1
        state.follow_lag.record(max(0.0, time.time() - event.ts), self.attributes)
        state.follow_lag_events.record(max(0, self.head - event.seq), self.attributes)

    def end(self, exc: BaseException | None) -> None:
        """The follower stopped (closed, or ``exc``): its span ends, no duration
        recorded (a follower's life is not an operation's latency)."""
        span = self.span
        ended: dict[str, Any] = {"agentlog.events": self.delivered, "agentlog.outcome": "ok"}
        # Closed or cancelled: its caller stopped it, which is no failure.
        if exc is not None and not isinstance(exc, (GeneratorExit, asyncio.CancelledError)):
            ended["agentlog.outcome"] = _outcome(exc, _Op())
            ended["error.type"] = _failed(span, exc)
        span.set_attributes(ended)
        span.end()


def _failed(span: Span, exc: BaseException) -> str:
    """``exc`` recorded on ``span`` (the exception, an error status); its ``error.type``."""
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, str(exc)))
    return type(exc).__qualname__


def _current(span: Span) -> contextlib.AbstractContextManager[Span]:
    """``span`` current in this context for a block, its outcome left to its owner."""
    return trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )


def _session_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
    return args[0] if args else kwargs.get("session_id")


#: The follower whose step runs in this context: its looks note the head there.
_FOLLOWING: contextvars.ContextVar[_Follower | None] = contextvars.ContextVar(
    "agentlog.telemetry.follower", default=None
)


def _noting_head(anchored: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
    """``anchored_page``, which every follower's look calls with the head it read."""

    @functools.wraps(anchored)
    def noted(
        session_id: str, after_seq: int, anchor: Any, page: list[Any], head: int
    ) -> list[Any]:
        follower = _FOLLOWING.get()
        if follower is not None:
            # A look that read the head before a commit and the page after
            # it: the page's last event is the head it knows.
            follower.head = max(follower.head, head, page[-1].seq if page else 0)
        return anchored(session_id, after_seq, anchor, page, head)

    return noted


def _following(state: _Telemetry, follow: Callable[..., Iterator[Any]]) -> Callable[..., Any]:
    @functools.wraps(follow)
    def followed(self: BaseCheckpointer, *args: Any, **kwargs: Any) -> Iterator[Any]:
        events = follow(self, *args, **kwargs)  # its arguments checked now, as follow's are
        follower = _Follower(state, self, _session_of(args, kwargs))

        def lagging() -> Iterator[Any]:
            failure: BaseException | None = None
            try:
                while True:
                    token = _FOLLOWING.set(follower)
                    try:
                        with _current(follower.span):
                            event = next(events)
                    except StopIteration:
                        return
                    finally:
                        _FOLLOWING.reset(token)
                    follower.deliver(state, event)
                    yield event
            except BaseException as exc:
                failure = exc
                raise
            finally:
                close = getattr(events, "close", None)
                if close is not None:
                    close()
                follower.end(failure)

        return lagging()

    return followed


def _async_following(state: _Telemetry, follow: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(follow)
    def followed(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        events = follow(self, *args, **kwargs)
        follower = _Follower(state, self, _session_of(args, kwargs))

        async def lagging() -> AsyncIterator[Any]:
            failure: BaseException | None = None
            try:
                while True:
                    token = _FOLLOWING.set(follower)
                    try:
                        with _current(follower.span):
                            event = await events.__anext__()
                    except StopAsyncIteration:
                        return
                    finally:
                        _FOLLOWING.reset(token)
                    follower.deliver(state, event)
                    yield event
            except BaseException as exc:
                failure = exc
                raise
            finally:
                close = getattr(events, "aclose", None)
                if close is not None:
                    await close()
                follower.end(failure)

        return lagging()

    return followed


#: The stores' operations (each store's base class: every implementation's),
#: the collection each names in ``db.collection.name``, its writes, its reads.
_STORE_OPERATIONS = (
    (
        SessionStore,
        "sessions",
        ("create", "append", "compact", "delete", "prune", "prune_all"),
        ("get", "load", "list"),
    ),
    (CheckpointStore, "checkpoints", ("save", "delete"), ("load", "list")),
    (MemoryStore, "memory", ("put", "delete"), ("get", "list")),
    (ArtifactStore, "artifacts", ("put", "delete"), ("info", "get", "list")),
)


def _store_system(store: object) -> str:
    name = type(store).__name__
    if name.startswith("Sqlite"):
        return "sqlite"
    if name.startswith("Postgres"):
        return "postgresql"
    return "agentlog." + ("memory" if name.startswith("InMemory") else name.lower())


def _store_operation(
    state: _Telemetry, store: type, collection: str, name: str
) -> Callable[..., Any]:
    original = vars(store)[name]
    loads = store is SessionStore and name == "load"  # it reads items: counted

    @functools.wraps(original)
    def operation(self: Any, tenant_id: str, *args: Any, **kwargs: Any) -> Any:
        if _CURRENT.get() is not None:
            return original(self, tenant_id, *args, **kwargs)
        attributes = {
            "db.system.name": _store_system(self),
            "db.operation.name": name,
            "db.collection.name": collection,
        }
        span_attributes: dict[str, Any] = dict(attributes)
        if state.record_ids:
            span_attributes["agentlog.tenant"] = str(tenant_id)
        span = state.tracer.start_span(
            f"{name} {collection}", kind=SpanKind.CLIENT, attributes=span_attributes
        )
        op = _Op()
        token = _CURRENT.set(op)
        started = time.perf_counter()
        try:
            current = otel_context.attach(trace.set_span_in_context(span))
            try:
                result = original(self, tenant_id, *args, **kwargs)
            finally:
                otel_context.detach(current)
        except BaseException as exc:
            state.finish(span, attributes, started, op, exc)
            raise
        finally:
            _CURRENT.reset(token)
        state.finish(span, attributes, started, op, None, len(result.items) if loads else 0)
        return result

    return operation


def _checking(state: _Telemetry, check: Callable[..., tuple[bool, str]]) -> Callable[..., Any]:
    @functools.wraps(check)
    def checked(self: BaseCheckpointer, *args: Any, **kwargs: Any) -> tuple[bool, str]:
        span, attributes = state.start("check", self, None)
        started = time.perf_counter()
        try:
            ok, detail = check(self, *args, **kwargs)
        except BaseException as exc:
            state.finish(span, attributes, started, _Op(), exc)
            raise
        span.set_attribute("agentlog.check.ok", ok)
        if not ok:
            state.damaged_checks.add(1, attributes)
            _log.warning(
                "check found damage in a %s store: %s",
                attributes["db.system.name"],
                detail.splitlines()[0] if detail else "",
            )
        state.finish(span, attributes, started, _Op(), None)
        return ok, detail

    return checked


def _async_operation(state: _Telemetry, name: str) -> Callable[..., Any]:
    owner = AsyncLogFace if name == "append" else None
    originals: dict[type, Callable[..., Any]] = {}

    async def operation(self: Any, session_id: str, *args: Any, **kwargs: Any) -> Any:
        original = originals[owner or _owner_of(type(self), name)]
        op = _Op()
        token = _CURRENT.set(op)
        span, attributes = state.start(name, self, session_id)
        started = time.perf_counter()
        try:
            current = otel_context.attach(trace.set_span_in_context(span))
            try:
                result = await original(self, session_id, *args, **kwargs)
            finally:
                otel_context.detach(current)
        except BaseException as exc:
            state.finish(span, attributes, started, op, exc)
            raise
        finally:
            _CURRENT.reset(token)
        state.finish(span, attributes, started, op, None)
        return result

    for cls in (AsyncLogFace, *_ASYNC_CLASSES):
        if name in vars(cls):
            originals[cls] = vars(cls)[name]
    return operation


def _owner_of(cls: type, name: str) -> type:
    for klass in cls.__mro__:
        if (klass is AsyncLogFace or klass in _ASYNC_CLASSES) and name in vars(klass):
            return klass
    raise AttributeError(name)


class _TracedEvents:
    """A read's events, its span open until they are all read (or dropped)."""

    def __init__(
        self, state: _Telemetry, events: Any, span: Span, attributes: dict[str, str]
    ) -> None:
        self._state = state
        self._events = events
        self._span = span
        self._attributes = attributes
        self._started = time.perf_counter()
        self._count = 0
        self._op = _Op()
        self._done = False

    def _finish(self, exc: BaseException | None) -> None:
        if not self._done:
            self._done = True
            self._state.finish(
                self._span, self._attributes, self._started, self._op, exc, self._count
            )

    def __del__(self) -> None:
        self._finish(None)


class _TracedIterator(_TracedEvents):
    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        token = _CURRENT.set(self._op)
        try:
            event = next(self._events)
        except StopIteration:
            self._finish(None)
            raise
        except BaseException as exc:
            self._finish(exc)
            raise
        finally:
            _CURRENT.reset(token)
        self._count += 1
        return event

    def close(self) -> None:
        self._events.close()
        self._finish(None)


class _TracedAsyncIterator(_TracedEvents):
    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        token = _CURRENT.set(self._op)
        try:
            event = await self._events.__anext__()
        except StopAsyncIteration:
            self._finish(None)
            raise
        except BaseException as exc:
            self._finish(exc)
            raise
        finally:
            _CURRENT.reset(token)
        self._count += 1
        return event

    async def aclose(self) -> None:
        await self._events.aclose()
        self._finish(None)


def _sync_read(state: _Telemetry, name: str) -> Callable[..., Any]:
    original = getattr(BaseCheckpointer, name)

    @functools.wraps(original)
    def read(self: BaseCheckpointer, session_id: str, *args: Any, **kwargs: Any) -> Any:
        if _CURRENT.get() is not None:
            return original(self, session_id, *args, **kwargs)
        span, attributes = state.start(name, self, session_id)
        try:
            events = original(self, session_id, *args, **kwargs)
        except BaseException as exc:
            state.finish(span, attributes, time.perf_counter(), _Op(), exc)
            raise
        return _TracedIterator(state, events, span, attributes)

    return read


def _async_read(state: _Telemetry, name: str) -> Callable[..., Any]:
    originals: dict[type, Any] = {cls: vars(cls)[name] for cls in _ASYNC_CLASSES}

    def read(self: Any, session_id: str, *args: Any, **kwargs: Any) -> Any:
        original = originals[_owner_of(type(self), name)]
        span, attributes = state.start(name, self, session_id)
        try:
            events = original(self, session_id, *args, **kwargs)
        except BaseException as exc:
            state.finish(span, attributes, time.perf_counter(), _Op(), exc)
            raise
        return _TracedAsyncIterator(state, events, span, attributes)

    return read
