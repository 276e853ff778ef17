"""The one writer of the event journal: the log's append, the SessionStore's
items and the migration's bulk load all write events through it.

An append is one statement (and so one round trip and one transaction in
autocommit): an ``UPDATE … WHERE head = expected RETURNING head`` (or, for a
session that may not exist yet, ``INSERT … ON CONFLICT DO UPDATE … WHERE``)
whose row lock serialises writers of one session, and an ``INSERT … SELECT
FROM unnest(types, payloads)`` of the batch in the same statement, numbered
from the head it returned. The arrays are sent in binary (``%b``): psycopg's
default, text, escapes every element in Python — and already dumped
(:mod:`.arrays`), since psycopg's binary dumper still walks them element by
element. Measured for a 100-event
batch (``benchmarks/postgres.py``): this statement 0.48 ms; ``BEGIN``, a
``SELECT … FOR UPDATE``, the insert and an ``UPDATE`` of the head, then
``COMMIT``: 0.70 ms with the same binary ``unnest``, 0.74 ms with ``COPY``,
1.41 ms with one multi-row ``VALUES``, 1.52 ms with text arrays, 1.80 ms
with ``executemany`` (pipelined). A stale ``expected_head`` updates no row,
so nothing is inserted; only then a second statement reads the actual head
for the error. The store's items (which carry their own times and ids) are
the same ``unnest`` insert after the head was moved under its row lock; a
migration's sessions go in with ``COPY``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from ...events import EncodedBatch
from ...integrity import checksum
from .arrays import ByteaArray, Int8Array, TextArray
from .protocol import NONE, ONE, Copy, Execute, Operation
from .statements import Statements

__all__ = [
    "AppendRequest",
    "Entry",
    "append_step",
    "notify_key",
    "payload_of",
    "write_entries",
]

_kind = operator.itemgetter(0)
#: An encoded event's payload (``(type, payload)``), for C-level loops.
payload_of = operator.itemgetter(1)

#: ``(session_id, expected_head, batch)``: one append.
AppendRequest = tuple[str, "int | None", EncodedBatch]

#: A journal entry as the store and the migration give it: ``(ts, type,
#: payload, item_id | None)``.
Entry = tuple[float, str, bytes, "str | None"]


def notify_key(tenant: str, name: str) -> str:
    """The text a notification carries after the head: the session's key."""
    return orjson.dumps([tenant, name]).decode()


def append_step(
    q: Statements, tenant: str, request: AppendRequest, ts: float, notify: bool
) -> Execute:
    """The one statement of an append ``(name, expected, batch)`` (its row: the
    new head, or none when the compare-and-set refused it)."""
    name, expected, batch = request
    payloads = list(map(payload_of, batch))
    params = {
        "t": tenant,
        "name": name,
        "n": len(batch),
        "ts": ts,
        "exp": expected,
        "types": TextArray(list(map(_kind, batch))),
        "payloads": ByteaArray(payloads),
        "crcs": Int8Array(list(map(checksum, payloads))),
        "channel": q.channel,
        "key": notify_key(tenant, name),
    }
    return Execute(q.append[not expected, notify], params, ONE)


def _rows(tenant: str, name: str, first_seq: int, entries: Sequence[Entry]) -> Iterator[Any]:
    for seq, (ts, kind, payload, item_id) in enumerate(entries, first_seq):
        yield (tenant, name, seq, ts, kind, payload, item_id, checksum(payload))


def write_entries(
    q: Statements,
    tenant: str,
    name: str,
    after: int,
    entries: Sequence[Entry],
    *,
    bulk: bool = False,
) -> Operation[None]:
    """Insert ``entries`` as the events after seq ``after`` (the caller holds
    the session's row and moves its head). ``bulk`` (a migration): ``COPY``."""
    if bulk:
        yield Copy(q.copy_journal, _rows(tenant, name, after + 1, entries))
        return
    columns = (
        [entry[0] for entry in entries],
        [entry[1] for entry in entries],
        [entry[2] for entry in entries],
        [entry[3] for entry in entries],
        [checksum(entry[2]) for entry in entries],
    )
    yield Execute(q.add_items, (tenant, name, after, *columns), NONE)
