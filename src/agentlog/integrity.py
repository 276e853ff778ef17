"""Integrity the log can prove: a checksum per stored event, an optional hash chain.

Every backend that stores bytes (SQLite, both engines; the file backend;
PostgreSQL) keeps with each event the CRC-32 of its payload — the JSON bytes
as stored, :func:`checksum` (``zlib.crc32``; the C engine computes the same in
C) — and verifies it on every read. An event whose payload does not match or
does not decode raises :class:`~agentlog.errors.CorruptDatabaseError` naming
its session and seq, after every event before it was returned. Events written
before checksums existed carry none and are read unverified.

The hash chain (opt-in, SQLite) links each event of a session to the one
before it: ``digest(seq) = sha256(digest(seq - 1) || payload || seq)``, with
32 zero bytes before event 1 and ``seq`` as 8 bytes big-endian. The last
event's digest (the *head digest*) covers the whole session in order: kept
elsewhere, it proves the session was not edited, reordered or cut since.
"""

from __future__ import annotations

import functools
import hashlib
import operator
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import repeat
from typing import Any, NamedTuple

from .errors import CorruptDatabaseError, damaged_event
from .events import RawEvent, decode_json

__all__ = [
    "GENESIS",
    "ChainReport",
    "DamagedEvent",
    "Progress",
    "chain_digest",
    "checked_payloads",
    "checked_raw_page",
    "checksum",
    "checksum_problem",
    "describe_damage",
    "first_damaged",
    "missing_events",
    "payload_problem",
    "session_damage",
    "stored_bytes",
    "verify_checksums",
    "walk_chain",
]

#: Told ``(sessions checked, sessions in all)`` as a deep check goes.
Progress = Callable[[int, int], None]

#: The digest before a session's first event.
GENESIS = bytes(32)

#: A RawEvent from its fields' tuple, with no Python-level call.
_raw_event = functools.partial(tuple.__new__, RawEvent)


def stored_bytes(payload: bytes | str) -> bytes:
    """A stored payload as bytes: a payload changed behind agentlog's back may
    come back as TEXT (``replace()`` on a BLOB gives TEXT), which is checked
    (and found damaged) as its UTF-8 bytes rather than failing the check."""
    return payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else bytes(payload)


def checksum(payload: bytes) -> int:
    """The CRC-32 of ``payload`` as stored with it (``zlib.crc32``)."""
    return zlib.crc32(payload)


def chain_digest(previous: bytes, payload: bytes, seq: int) -> bytes:
    """The chain link of event ``seq``: ``sha256(previous || payload || seq)``."""
    return hashlib.sha256(previous + payload + seq.to_bytes(8, "big")).digest()


def checksum_problem(payload: bytes, crc: int | None) -> str | None:
    """A stored payload's checksum that does not match it, in words, or ``None``
    (also for a payload stored without one)."""
    if crc is None:
        return None
    computed = zlib.crc32(payload)
    if computed != crc:
        return f"payload checksum mismatch (stored {crc:#010x}, computed {computed:#010x})"
    return None


def payload_problem(payload: bytes, crc: int | None) -> str | None:
    """What is wrong with a stored payload, or ``None``: a checksum that does not
    match (when it has one), or bytes that are not one JSON object."""
    problem = checksum_problem(payload, crc)
    if problem is not None:
        return problem
    try:
        value = decode_json(payload)
    except ValueError as exc:
        return f"payload does not decode ({exc})"
    if not isinstance(value, dict):
        return "payload is not a JSON object"
    return None


def first_damaged(session_id: str, rows: Iterable[Sequence[Any]]) -> CorruptDatabaseError:
    """The error naming the first damaged event of a page of ``(seq, ts, type,
    payload, crc)`` rows (a page that a decode refused as a whole)."""
    first = None
    for row in rows:
        first = int(row[0]) if first is None else first
        problem = payload_problem(stored_bytes(row[3]), row[4])
        if problem is not None:
            return damaged_event(session_id, int(row[0]), problem)
    return damaged_event(session_id, first or 0, "the page's payloads do not decode one to one")


def verify_checksums(session_id: str, rows: Sequence[Sequence[Any]]) -> list[Any]:
    """Check a page of ``(seq, ts, type, payload, crc)`` rows against their crcs
    (rows without one pass); return the payloads. The first mismatch raises
    :class:`CorruptDatabaseError` naming it."""
    payloads = [row[3] for row in rows]
    # Compared as two lists (the loops in C); only a page that differs anywhere
    # (a damaged event, or rows written before checksums) is looked at row by row.
    try:
        computed = list(map(zlib.crc32, payloads))
    except TypeError:  # a payload stored as TEXT
        payloads = [stored_bytes(payload) for payload in payloads]
        computed = list(map(zlib.crc32, payloads))
    if computed != [row[4] for row in rows]:
        for row, crc in zip(rows, computed, strict=True):
            if row[4] is not None and crc != row[4]:
                raise first_damaged(session_id, rows)
    return payloads


def checked_payloads(session_id: str, rows: Sequence[Sequence[Any]]) -> list[Any]:
    """The decoded payloads of a page of ``(seq, ts, type, payload, crc)`` rows, each
    checked against its crc (when it has one); the first damaged event raises
    :class:`CorruptDatabaseError` naming it. One decode call for the page."""
    payloads = verify_checksums(session_id, rows)
    try:
        events: list[Any] = decode_json(b"[" + b",".join(payloads) + b"]")
    except ValueError:
        raise first_damaged(session_id, rows) from None
    if len(events) != len(rows):
        raise first_damaged(session_id, rows)
    return events


def checked_raw_page(session_id: str, rows: Sequence[Sequence[Any]]) -> list[RawEvent]:
    """A page of ``(seq, ts, type, payload, crc)`` rows as :class:`RawEvent`, not
    decoded: each payload checked against its crc, and one stored without a
    crc (written before checksums) decoded once to check it is an object.
    The first damaged event raises :class:`CorruptDatabaseError` naming it."""
    if not rows:
        return []
    payloads = verify_checksums(session_id, rows)
    seqs, times, kinds, _, crcs = zip(*rows, strict=True)
    if None in crcs:
        for seq, payload, crc in zip(seqs, payloads, crcs, strict=True):
            problem = None if crc is not None else payload_problem(stored_bytes(payload), None)
            if problem is not None:
                raise damaged_event(session_id, int(seq), problem)
    # Column by column, the loops in C: a Python loop per row cost more than the read.
    parents = map(operator.sub, seqs, repeat(1))
    return list(map(_raw_event, zip(seqs, parents, times, kinds, payloads, strict=True)))


def session_damage(
    tenant: str,
    name: str,
    head: int,
    covered: int,
    events: Iterable[tuple[int, bytes, int | None]],
) -> list[DamagedEvent]:
    """What a deep check finds in one session, from its stored ``(seq, payload,
    crc)`` in order: each payload that fails its checksum or does not decode,
    and each gap (see :func:`missing_events`), by seq."""
    found, seqs = [], []
    for seq, payload, crc in events:
        seqs.append(seq)
        problem = payload_problem(payload, crc)
        if problem is not None:
            found.append(DamagedEvent(tenant, name, seq, problem))
    found += missing_events(tenant, name, head, covered, seqs)
    return sorted(found, key=lambda event: event.seq)


def missing_events(
    tenant: str, name: str, head: int, covered: int, seqs: Iterable[int]
) -> Iterator[DamagedEvent]:
    """The gaps in a session's stored ``seqs`` (in order) up to ``head``. Events
    up to ``covered`` (what the newest snapshot covers) may be gone from the
    start: retention prunes them, and that is no gap."""
    seen = 0
    for seq in seqs:
        if seen == 0 and 1 < seq <= covered + 1:
            seen = seq - 1  # pruned after a snapshot
        if seq != seen + 1:
            yield DamagedEvent(tenant, name, seen + 1, f"missing (next is {seq})")
        seen = seq
    if seen < head and not (seen == 0 and head <= covered):
        yield DamagedEvent(tenant, name, seen + 1, f"missing (head is {head})")


class DamagedEvent(NamedTuple):
    """One damaged event a deep check found."""

    tenant: str
    session_id: str
    seq: int
    problem: str


def describe_damage(damaged: Iterable[DamagedEvent]) -> list[str]:
    """One line per damaged event: ``session 'id' (tenant t), event 7: problem``
    (no tenant for a store that has none)."""
    return [
        f"session {d.session_id!r}{f' (tenant {d.tenant})' if d.tenant else ''}, "
        f"event {d.seq}: {d.problem}"
        for d in damaged
    ]


class ChainReport(NamedTuple):
    """What ``verify`` found for one session.

    ``digest`` is the head digest (hex) recomputed from the stored events,
    ``None`` for an empty session. ``problem`` is ``None`` when every event's
    stored link matches the recomputed chain; otherwise it names the first
    event that does not (or that carries no link).
    """

    session_id: str
    head: int
    digest: str | None
    problem: str | None


def walk_chain(
    session_id: str,
    head: int,
    events: Iterable[tuple[int, bytes, bytes | None]],
    covered: int = 0,
) -> ChainReport:
    """Recompute a session's chain from ``(seq, payload, stored digest)`` in seq
    order and compare each stored link with it.

    A session whose first events retention pruned (up to ``covered``, what its
    newest snapshot covers) is checked from its first kept event on: that
    event's stored link is the anchor, since what it was computed from is gone.
    """
    previous = GENESIS
    problem: str | None = None
    expected_seq = 0
    for seq, payload, stored in events:
        if expected_seq == 0 and 1 < seq <= covered + 1 and stored is not None:
            expected_seq, previous = seq, bytes(stored)  # the anchor
            continue
        expected_seq += 1
        if problem is None and seq != expected_seq:
            problem = f"event {expected_seq} is missing (found {seq})"
        computed = chain_digest(previous, payload, seq)
        if problem is None:
            if stored is None:
                problem = f"event {seq} has no chain link (written without hash_chain)"
            elif bytes(stored) != computed:
                problem = f"event {seq} does not match its chain link"
        previous = computed
    if expected_seq == 0 and 0 < head <= covered:
        expected_seq = head  # every event pruned after a snapshot: nothing to walk
    if problem is None and expected_seq != head:
        problem = f"the session holds events up to {expected_seq}, its head says {head}"
    digest = previous.hex() if expected_seq and previous != GENESIS else None
    return ChainReport(session_id, head, digest, problem)
