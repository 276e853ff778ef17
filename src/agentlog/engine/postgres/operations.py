"""The log's operations on PostgreSQL, each written once and without I/O.

Each function returns an :data:`~.protocol.Operation`: a generator of the
statements to run, sent back their results (see :mod:`.protocol`). The
synchronous and the asynchronous drivers run the same ones; which need a
transaction says each docstring ("in a transaction"), and the driver opens it.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any, NamedTuple, TypeVar

from ...errors import (
    CheckpointConflictError,
    EventsPrunedError,
    StorageConflictError,
    fork_past_head,
    no_session_to_fork,
    session_exists,
)
from ...events import (
    MAX_POSITION,
    AppendKey,
    EncodedBatch,
    RawEvent,
    StoredEvent,
    check_retained,
)
from ...integrity import checked_payloads, checked_raw_page
from .. import AVAILABLE_ENGINES
from .journal import AppendRequest, append_step, notify_key
from .protocol import ALL, Execute, Operation, execute, fetch_all, fetch_one, pipeline
from .schema import schema_version
from .statements import Statements

__all__ = [
    "CHECK_PAGE",
    "MAX_SEQ",
    "AppendRequest",
    "GroupPlan",
    "all_sessions",
    "append",
    "append_group",
    "append_keyed",
    "checked_json_page",
    "checked_page",
    "checked_rows",
    "damage_report",
    "delete",
    "delete_idle_batch",
    "find_append_key",
    "first_retained",
    "fork",
    "fork_origin",
    "forks_of",
    "head",
    "head_and_mtime",
    "list_all_sessions",
    "list_sessions",
    "list_sessions_metadata",
    "list_sessions_page",
    "plan_group",
    "retained_start",
    "scan",
    "scan_json",
    "scan_rows",
    "scan_statement",
    "session_metadata",
    "set_metadata",
    "snapshot",
    "stats",
    "stored_page",
    "truncate",
]

#: A StoredEvent from its fields' tuple, with no Python-level call.
_stored = functools.partial(tuple.__new__, StoredEvent)

#: The C engine's twin of :func:`stored_page` where the C engine is loaded.
_c_page: Callable[[str, list[tuple[Any, ...]]], list[StoredEvent] | None] | None = None
if "c" in AVAILABLE_ENGINES:
    from ..cengine import postgres_page as _c_page

#: Seqs are ``bigint``: the contract's own bound (events.MAX_POSITION).
MAX_SEQ = MAX_POSITION

#: An event of either kind a page is read as: decoded, or its JSON as stored.
_E = TypeVar("_E", StoredEvent, RawEvent)


def snapshot(q: Statements) -> Operation[None]:
    """The first step of a read from one snapshot (in a transaction)."""
    yield from execute(q.snapshot_transaction)


def notify(q: Statements, tenant: str, name: str, head: int, notifying: bool) -> Operation[None]:
    """Tell followers of the session its new head (delivered at commit)."""
    if notifying:
        yield from fetch_all(q.notify, (q.channel, f"{head} {notify_key(tenant, name)}"))


# -- reading ------------------------------------------------------------------------------


def head(q: Statements, tenant: str, name: str) -> Operation[int]:
    """The head of a session; 0 for an unknown one."""
    row = yield from fetch_one(q.head, (tenant, name))
    return 0 if row is None else int(row[0])


def head_and_mtime(q: Statements, tenant: str, name: str) -> Operation[tuple[int, float]]:
    """The head and the mtime of a session; ``(0, 0.0)`` for an unknown one."""
    row = yield from fetch_one(q.head_mtime, (tenant, name))
    return (0, 0.0) if row is None else (int(row[0]), float(row[1]))


def retained_start(row: Sequence[Any] | None) -> int:
    """Where a session's events start, from a ``(head, first stored seq)`` row."""
    if row is None:
        return 1
    return int(row[0]) + 1 if row[1] is None else int(row[1])


def first_retained(q: Statements, tenant: str, name: str) -> Operation[int]:
    """The seq of the session's first stored event (``head + 1`` when none is;
    1 for an unknown session)."""
    return retained_start((yield from fetch_one(q.retained, (tenant, name))))


def stored_page(name: str, rows: Sequence[Sequence[Any]]) -> list[StoredEvent]:
    """A page of ``(seq, ts, type, payload, crc)`` rows as events, each checked
    against its checksum (:class:`CorruptDatabaseError` for a damaged one)."""
    if not rows:
        return []
    if _c_page is not None and type(rows) is list:
        # In C: the crcs, one decode, each event from the row's own objects.
        page = _c_page(name, rows)
        if page is not None:
            return page
    events = checked_payloads(name, rows)
    # Column by column and C-level loops: a Python-level loop building each
    # event cost a third as much as decoding the page.
    seqs, times, kinds = (list(map(operator.itemgetter(column), rows)) for column in range(3))
    parents = map(operator.sub, seqs, repeat(1))
    return list(map(_stored, zip(seqs, parents, times, kinds, events, strict=True)))


def scan_statement(q: Statements, tenant: str, name: str, since: int, limit: int) -> Execute:
    """The statement of a keyset page: the ``(seq, ts, type, payload, crc)`` rows
    of up to ``limit`` events after ``since``, in seq order (results in binary:
    bytea then needs no hex decoding)."""
    return Execute(q.scan, (tenant, name, since, limit), ALL, True)


def scan_rows(
    q: Statements, tenant: str, name: str, since: int, limit: int
) -> Operation[list[tuple[Any, ...]]]:
    """The rows of :func:`scan_statement`, none past the last possible seq."""
    if since >= MAX_SEQ:
        return []
    rows: list[tuple[Any, ...]] = yield scan_statement(q, tenant, name, since, limit)
    return rows


def _page_reader(
    decode: Callable[[str, Sequence[Sequence[Any]]], list[_E]], checked: bool
) -> Callable[[Statements, str, str, int, int], Operation[list[_E]]]:
    """The operation reading up to ``limit`` events after ``since`` in seq order
    (one keyset page) as ``decode`` makes them of their rows; ``checked``:
    :class:`EventsPrunedError` when retention pruned the events right after
    ``since`` (the rule of ``BaseCheckpointer.read``)."""

    def read(q: Statements, tenant: str, name: str, since: int, limit: int) -> Operation[list[_E]]:
        rows = yield from scan_rows(q, tenant, name, since, limit)
        page = decode(name, rows)
        if checked:
            yield from _check_page_start(q, tenant, name, since, page[0].seq if page else None)
        return page

    return read


# The four page readers, one table: events decoded or each one's JSON as
# stored (checked against its crc, not decoded), and the retention check or not.
#: ``(q, tenant, name, since, limit)``: a page of events.
scan = _page_reader(stored_page, checked=False)
#: ``(q, tenant, name, since, limit)``: a page of each event's JSON as stored.
scan_json = _page_reader(checked_raw_page, checked=False)
#: :data:`scan`, or :class:`EventsPrunedError` where retention pruned the page's start.
checked_page = _page_reader(stored_page, checked=True)
#: :data:`scan_json`, or :class:`EventsPrunedError` where retention pruned the page's start.
checked_json_page = _page_reader(checked_raw_page, checked=True)


def _check_page_start(
    q: Statements, tenant: str, name: str, since: int, first: int | None
) -> Operation[None]:
    """:class:`EventsPrunedError` unless the page after ``since`` starts at
    ``since + 1`` (``first``: its first seq; None for an empty page, when the
    session's first retained event is asked for)."""
    if first is None:
        first = yield from first_retained(q, tenant, name)
    if first > since + 1:
        raise EventsPrunedError(name, since, first)


def list_sessions(q: Statements, tenant: str) -> Operation[list[tuple[str, float, int]]]:
    """``(name, mtime, head)`` of the tenant's sessions, most recently active first."""
    rows = yield from fetch_all(q.list, (tenant,))
    return [(str(n), float(m), int(h)) for n, m, h in rows]


def list_all_sessions(q: Statements) -> Operation[list[tuple[str, str, float, int]]]:
    """``(tenant, name, mtime, head)`` of every session, most recently active first."""
    rows = yield from fetch_all(q.list_all)
    return [(str(t), str(n), float(m), int(h)) for t, n, m, h in rows]


def list_sessions_metadata(
    q: Statements, tenant: str
) -> Operation[list[tuple[str, float, int, bytes | None, int]]]:
    """``(name, mtime, head, metadata json | None, revision)`` of the tenant's
    sessions, most recently active first."""
    rows = yield from fetch_all(q.list_metadata, (tenant,))
    return _listing_rows(rows)


def list_sessions_page(
    q: Statements, tenant: str, limit: int, after: tuple[float, str] | None
) -> Operation[list[tuple[str, float, int, bytes | None, int]]]:
    """At most ``limit`` rows of :func:`list_sessions_metadata`'s shape,
    ``(activity second, name)`` descending, after ``after`` (None: from the start)."""
    if after is None:
        rows = yield from fetch_all(q.list_page, (tenant, limit))
    else:
        mtime, name = after
        rows = yield from fetch_all(q.list_page_after, (tenant, mtime, mtime, name, limit))
    return _listing_rows(rows)


def _listing_rows(rows: list[Any]) -> list[tuple[str, float, int, bytes | None, int]]:
    return [
        (str(n), float(m), int(h), None if d is None else bytes(d), int(r))
        for n, m, h, d, r in rows
    ]


def session_metadata(q: Statements, tenant: str, name: str) -> Operation[tuple[bytes | None, int]]:
    """``(metadata json | None, revision)``; ``(None, 0)`` for an unknown session."""
    row = yield from fetch_one(q.metadata, (tenant, name))
    if row is None:
        return None, 0
    return (None if row[0] is None else bytes(row[0])), int(row[1])


# -- appending ----------------------------------------------------------------------------


def append(
    q: Statements, tenant: str, request: AppendRequest, ts: float, notifying: bool
) -> Operation[int]:
    """Append ``(name, expected, batch)``: the batch after the head (checking
    ``expected``); the new head.

    In autocommit its own transaction (one statement), else the caller's.
    """
    name, expected, batch = request
    if expected is not None and expected > MAX_SEQ:
        raise CheckpointConflictError(name, expected, (yield from head(q, tenant, name)))
    if not batch:
        actual = yield from head(q, tenant, name)
        if expected is not None and expected != actual:
            raise CheckpointConflictError(name, expected, actual)
        return actual
    step = append_step(q, tenant, request, ts, notifying)
    while True:
        row = yield step
        if row is not None:
            return int(row[0])
        # Nothing written: the head was not the expected one. Which is it?
        actual = yield from head(q, tenant, name)
        if expected is not None and actual != expected:
            raise CheckpointConflictError(name, expected, actual)
        # It moved to the expected one in between: try again.


def append_keyed(
    q: Statements, tenant: str, request: AppendRequest, ts: float, notifying: bool, key: AppendKey
) -> Operation[int]:
    """A non-empty append under ``key`` (in a transaction): the new head, or,
    when the session holds the key, nothing written and ``key.replay`` of it.

    The key's row is claimed first: of two appends racing one key, the
    second waits on the first's claim and, once that commits, finds the row
    (read committed: each statement sees what committed before it); if the
    first rolls back, the second claims it. The append and its key commit
    together, so a key found on any connection means the append is in.
    """
    name = request[0]
    claimed = yield from fetch_one(q.claim_append_key, (tenant, name, key.name, key.digest))
    if claimed is None:
        found = yield from find_append_key(q, tenant, name, key.name)
        assert found is not None  # a claim that committed is never rolled back
        return key.replay(name, *found)
    new_head = yield from append(q, tenant, request, ts, notifying)
    yield from execute(q.set_append_key, (new_head, tenant, name, key.name))
    return new_head


def find_append_key(
    q: Statements, tenant: str, name: str, key: str
) -> Operation[tuple[bytes, int] | None]:
    """``(digest, head)`` stored under the session's ``key``, or None."""
    row = yield from fetch_one(q.append_key, (tenant, name, key))
    return None if row is None else (bytes(row[0]), int(row[1]))


def _outcome(
    q: Statements, tenant: str, request: AppendRequest, ts: float, notifying: bool
) -> Operation[int | Exception]:
    try:
        return (yield from append(q, tenant, request, ts, notifying))
    except CheckpointConflictError as exc:
        return exc


class GroupPlan(NamedTuple):
    """How a group of appends is written: ``refused`` (index -> error) are
    refused alone, before anything is sent; the others go in ``order``
    (sessions in id order, so two groups never deadlock), their statements
    ``pipelined`` when each names another session."""

    refused: dict[int, Exception]
    order: list[int]
    pipelined: bool


def plan_group(
    requests: Sequence[AppendRequest], oversized: Callable[[EncodedBatch], Exception | None]
) -> GroupPlan:
    """The plan of a group (``oversized(batch)``: the error for a batch too large
    for one statement, or ``None``)."""
    refused: dict[int, Exception] = {}
    for index, (_, _, batch) in enumerate(requests):
        error = oversized(batch)
        if error is not None:
            refused[index] = error
    order = sorted(
        (index for index in range(len(requests)) if index not in refused),
        key=lambda index: requests[index][0],
    )
    names = {requests[index][0] for index in order}
    pipelined = len(order) > 1 and len(names) == len(order)
    for index in order:
        _, expected, batch = requests[index]
        if not batch or (expected is not None and expected > MAX_SEQ):
            pipelined = False  # an empty or hopeless append reads the head first
    return GroupPlan(refused, order, pipelined)


def append_group(
    q: Statements,
    tenant: str,
    requests: Sequence[AppendRequest],
    ts: float,
    notifying: bool,
    plan: GroupPlan,
) -> Operation[list[int | Exception]]:
    """Several appends in one transaction, each refused (a conflict) alone.

    Pipelined (see :class:`GroupPlan`): every statement is sent at once and the
    results read after, so the group costs about one round trip; an append
    refused by its compare-and-set is then tried as a single append (no other
    append of the group touched that session).
    """
    results: list[int | Exception] = [0] * len(requests)
    for index, error in plan.refused.items():
        results[index] = error
    retry = plan.order
    if plan.pipelined:
        steps = [append_step(q, tenant, requests[index], ts, notifying) for index in plan.order]
        rows = yield from pipeline(steps)
        retry = []
        for index, row in zip(plan.order, rows, strict=True):
            if row is None:
                retry.append(index)
            else:
                results[index] = int(row[0])
    for index in retry:
        results[index] = yield from _outcome(q, tenant, requests[index], ts, notifying)
    return results


# -- changing -----------------------------------------------------------------------------


def set_metadata(
    q: Statements, tenant: str, name: str, data: bytes, expected: int, ts: float
) -> Operation[int]:
    """Compare-and-set the metadata on the session's revision (an unknown
    session is at 0 and is created, empty); the new revision. In a transaction."""
    row = yield from fetch_one(q.revision_for_update, (tenant, name))
    if row is None:
        if expected == 0:
            created = yield from fetch_one(q.create_with_metadata, (tenant, name, ts, ts, data))
            if created is not None:
                return int(created[0])
        # Created by another writer meanwhile: its revision now.
        row = yield from fetch_one(q.metadata, (tenant, name))
    actual = 0 if row is None else int(row[-1])
    if actual == expected:
        done = yield from fetch_one(q.set_metadata, (data, ts, tenant, name, expected))
        if done is not None:
            return int(done[0])
        row = yield from fetch_one(q.metadata, (tenant, name))
        actual = 0 if row is None else int(row[-1])
    raise StorageConflictError(f"session {name!r}", expected, actual)


def _check_retained(
    q: Statements, tenant: str, name: str, what: str, point: int, at_head: int
) -> Operation[None]:
    """Inside a write: refuse to go back below what retention left (see
    :func:`agentlog.events.check_retained`)."""
    found = yield from fetch_one(q.first_seq, (tenant, name))
    first = at_head + 1 if found is None else int(found[0])
    if first > 1:
        oldest = yield from fetch_one(q.oldest_snapshot, (tenant, name))
        check_retained(name, what, point, first, None if oldest is None else oldest[0])


def delete(q: Statements, tenant: str, name: str, notifying: bool) -> Operation[bool]:
    """Remove a session and everything of it; whether there was one. In a transaction."""
    # The session's row first: its lock waits for a running append, and the
    # later statements see everything that append wrote.
    if (yield from fetch_one(q.delete_session, (tenant, name))) is None:
        return False
    yield from execute(q.delete_events, (tenant, name))
    yield from execute(q.delete_snapshots, (tenant, name))
    yield from execute(q.delete_append_keys, (tenant, name))
    yield from execute(q.delete_fork_origin, (tenant, name))
    yield from notify(q, tenant, name, 0, notifying)
    return True


def truncate(
    q: Statements, tenant: str, name: str, to_seq: int, ts: float, notifying: bool
) -> Operation[tuple[int, bool]]:
    """Remove the events after ``to_seq``: ``(the new head, whether any went)``.
    In a transaction."""
    row = yield from fetch_one(q.head_for_update, (tenant, name))
    if row is None:
        return 0, False
    at_head = int(row[0])
    if to_seq >= at_head:
        return at_head, False
    yield from _check_retained(q, tenant, name, "truncate", to_seq, at_head)
    yield from execute(q.cut_events, (tenant, name, to_seq))
    yield from execute(q.cut_snapshots, (tenant, name, to_seq))
    yield from execute(q.cut_append_keys, (tenant, name, to_seq))
    yield from execute(q.set_head, (to_seq, ts, tenant, name))
    yield from notify(q, tenant, name, to_seq, notifying)
    return to_seq, True


def fork(
    q: Statements,
    tenant: str,
    name: str,
    at_seq: int,
    new_name: str,
    ts: float,
    notifying: bool,
) -> Operation[int]:
    """A new session holding events 1…``at_seq`` of ``name``. In a transaction."""
    row = yield from fetch_one(q.fork_head, (tenant, name))
    if row is None:
        raise no_session_to_fork(name)
    if at_seq > int(row[0]):
        raise fork_past_head(name, at_seq, int(row[0]))
    yield from _check_retained(q, tenant, name, "fork", at_seq, int(row[0]))
    created = yield from fetch_one(q.create_session, (tenant, new_name, at_seq, ts, ts))
    if created is None:
        raise session_exists(new_name)
    yield from execute(q.copy_events, (new_name, tenant, name, at_seq))
    yield from execute(q.copy_snapshots, (new_name, tenant, name, at_seq))
    yield from execute(q.copy_append_keys, (new_name, tenant, name, at_seq))
    yield from execute(q.insert_fork_origin, (tenant, new_name, name, at_seq))
    yield from notify(q, tenant, new_name, at_seq, notifying)
    return at_seq


def fork_origin(q: Statements, tenant: str, name: str) -> Operation[tuple[str, int] | None]:
    """``(source, seq)`` the session was forked from, or None (no record)."""
    if not q.records_lineage:  # a read-only store before version 6, as an older SQLite file
        return None
    row = yield from fetch_one(q.fork_origin, (tenant, name))
    return None if row is None else (str(row[0]), int(row[1]))


def forks_of(q: Statements, tenant: str, name: str) -> Operation[list[tuple[str, int]]]:
    """``(fork, seq)`` of the sessions whose recorded source is ``name``."""
    if not q.records_lineage:
        return []
    rows = yield from fetch_all(q.forks_of, (tenant, name))
    return [(str(fork), int(seq)) for fork, seq in rows]


# -- operating ----------------------------------------------------------------------------


def stats(q: Statements, largest: int) -> Operation[dict[str, Any]]:
    """Counts, the largest sessions and the tables' sizes, from one snapshot
    (in a transaction)."""
    yield from snapshot(q)
    totals = yield from fetch_one(q.totals)
    assert totals is not None
    rows = yield from fetch_all(q.largest, (largest,))
    sizes = yield from fetch_all(q.relation_sizes, (q.schema_name,))
    version = yield from schema_version(q.schema_name)
    server_row = yield from fetch_one(q.server_version)
    assert server_row is not None
    server = int(server_row[0])
    relation_bytes = {str(name): int(size) for name, size in sizes}
    return {
        "schema": q.schema_name,
        "schema_version": version,
        "server_version": f"{server // 10000}.{server % 10000}",
        "sessions": int(totals[0]),
        "tenants": int(totals[1]),
        "events": int(totals[2]),
        "relation_bytes": relation_bytes,
        "total_bytes": sum(relation_bytes.values()),
        "largest_sessions": [
            {"tenant": str(t), "session": str(n), "events": int(h), "mtime": float(m)}
            for t, n, h, m in rows
        ],
    }


def delete_idle_batch(
    q: Statements, tenant: str, before: float, batch: int, notifying: bool
) -> Operation[list[str]]:
    """One batch of retention (in a transaction): the sessions it deleted.

    It locks the sessions it picks and checks their ``mtime`` on the locked
    rows, so a session another process appends to meanwhile is kept.
    """
    names = [
        str(row[0])
        for row in (
            yield from fetch_all(q.idle, {"tenant": tenant, "before": before, "batch": batch})
        )
    ]
    if names:
        yield from execute(q.delete_events_of, (tenant, names))
        yield from execute(q.delete_snapshots_of, (tenant, names))
        yield from execute(q.delete_append_keys_of, (tenant, names))
        yield from execute(q.delete_fork_origins_of, (tenant, names))
        yield from execute(q.delete_sessions, (tenant, names))
        for name in names:
            yield from notify(q, tenant, name, 0, notifying)
    return names


#: Events per read of a deep check.
CHECK_PAGE = 1000


def all_sessions(q: Statements) -> Operation[list[tuple[str, str, int, int]]]:
    """``(tenant, name, head, seq the newest snapshot covers or 0)`` of every
    session, for a deep check (retention may have pruned up to that seq)."""
    rows = yield from fetch_all(q.all_sessions)
    return [(str(t), str(n), int(h), int(c)) for t, n, h, c in rows]


def checked_rows(
    q: Statements, tenant: str, name: str, after: int
) -> Operation[list[tuple[int, bytes, int | None]]]:
    """A page of :data:`CHECK_PAGE` stored ``(seq, payload, crc)`` after ``after``."""
    rows = yield from fetch_all(q.checked, (tenant, name, after, CHECK_PAGE))
    return [(int(seq), bytes(payload), crc) for seq, payload, crc in rows]


def damage_report(q: Statements, limit: int) -> Operation[list[str]]:
    """The log's shape, one line per problem (in a transaction): sessions whose
    events are not a gapless run up to the head, events without a session."""
    yield from snapshot(q)
    damaged = yield from fetch_all(q.damaged, (limit,))
    orphans = yield from fetch_all(q.orphans, (limit,))
    problems = [
        f"session {tenant}/{name}: head {at_head}, but {count} event(s) numbered {lo}..{hi}"
        for tenant, name, at_head, count, lo, hi in damaged
    ]
    problems += [
        f"{count} event(s) of {tenant}/{name}, which has no session row"
        for tenant, name, count in orphans
    ]
    return problems
