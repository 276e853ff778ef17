"""The file store's on-disk format: session files, their lines, metadata files.

Layout of a session file::

    {"agentlog":1,"session":"<id>","created":<ts>}          <- header
    {"seq":1,"end":2,"ts":<ts>,"crc":<crc>,"event":{...}}   <- batch 1..2
    {"seq":2,"end":2,"ts":<ts>,"crc":<crc>,"event":{...}}
    {"seq":3,"end":3,"ts":<ts>,"crc":<crc>,"event":{...}}   <- batch 3..3

A batch is written with one ``write`` call (and an ``fsync`` with
``fsync=True``). Every line carries the seq of its batch's last event
(``end``), so on open a batch that a crash left half-written — a torn last
line, or complete lines whose batch end never arrived — is detected and cut
off, leaving exactly the appends that had returned. Truncating or forking in
the middle of a batch rewrites that batch's ``end`` through a temporary file
and an atomic rename, so a crash never leaves a half-truncated log.

File names are ``<slug>.<hash>.jsonl``: a lower-case, readable slug of the id
plus 96 bits of its SHA-256, so no id can escape the directory and ids that
differ only by case never share a file, even on case-insensitive file systems.
The header holds the exact id. A fork's header also records where it came
from, ``"origin":{"session":"<source id>","seq":<n>}`` (its lineage), so a
plain copy of the directory keeps it; a truncate keeps the header as it is.

``crc`` is the CRC-32 (``zlib.crc32``) of the line's event bytes exactly as
written after ``"event":``; every read verifies it, and a line that does not
match (or does not decode) raises :class:`CorruptDatabaseError` naming the
session and seq, after the events before it. Lines written before checksums
existed have no ``crc`` and are read as before.

A session's metadata lives beside its log, in ``<slug>.<hash>.jsonl.meta``::

    {"agentlog":1,"session":"<id>","base":<int>}            <- header
    <the metadata's JSON>

written whole through a temporary file and an atomic rename, so a crash
leaves the old metadata or the new, never a mix. The session's revision is
``base + head``: an append raises it with the head, and a truncate or a
metadata change writes a new ``base`` that raises it past what it was (a
truncate writes it before it cuts the log). A session without the file (as
every file written before metadata existed) has no metadata and ``base`` 0.

Everything here works on bytes: reading and writing the files is the
checkpointer's (:mod:`.checkpointer`), opening them safely :mod:`.ownership`'s.
"""

from __future__ import annotations

import builtins
import hashlib
import re
import zlib
from array import array
from pathlib import Path
from typing import Any

import orjson

# The one import of the C engine's line check: the sqlite work may move it.
from ...engine import first_bad_crc_line
from ...errors import CorruptDatabaseError, damaged_event
from ...events import AppendKey, RawEvent, StoredEvent
from ...integrity import payload_problem

__all__ = [
    "METADATA_SUFFIX",
    "SUFFIX",
    "append_keys",
    "decode_page",
    "decode_record",
    "event_line",
    "header_line",
    "header_origin",
    "is_header",
    "line_payload",
    "line_problem",
    "metadata_file",
    "parse_session_file",
    "read_metadata_file",
    "read_session_file",
    "session_file_name",
    "session_file_origin",
]

#: What every session file's name ends with.
SUFFIX = ".jsonl"
#: What a session file's name takes to name its metadata file.
METADATA_SUFFIX = ".meta"
_SLUG_UNSAFE = re.compile(r"[^a-z0-9_-]+")
_new_stored = tuple.__new__


def session_file_name(session_id: str) -> str:
    """The file name that holds ``session_id`` (the id must be valid)."""
    digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:24]
    slug = _SLUG_UNSAFE.sub("_", session_id.lower())[:40] or "_"
    return f"{slug}.{digest}{SUFFIX}"


def header_line(session_id: str, created: float, origin: tuple[str, int] | None = None) -> bytes:
    """The first line of a new session file (with a fork's ``(source id, seq)``)."""
    header: dict[str, Any] = {"agentlog": 1, "session": session_id, "created": created}
    if origin is not None:
        header["origin"] = {"session": origin[0], "seq": origin[1]}
    return orjson.dumps(header) + b"\n"


def header_origin(header: bytes, name: str) -> tuple[str, int] | None:
    """The ``(source id, seq)`` a session file's header line records, or None
    when it records none; :class:`CorruptDatabaseError` when it is malformed."""
    try:
        origin = orjson.loads(header).get("origin")
    except (orjson.JSONDecodeError, AttributeError):
        origin = {}
    if origin is None:
        return None
    source = origin.get("session") if isinstance(origin, dict) else None
    seq = origin.get("seq") if isinstance(origin, dict) else None
    if not isinstance(source, str) or type(seq) is not int or seq < 0:
        raise CorruptDatabaseError(f"{name}: the header's fork origin is malformed")
    return source, seq


def event_line(
    seq: int, end: int, ts: float, payload: bytes, key: AppendKey | None = None
) -> bytes:
    """One event line: event ``seq`` of the batch ending at ``end``, its crc over
    ``payload``; the last line of a keyed append also carries its ``key`` and
    ``digest`` (hex), before ``"event"`` (so the payload stays the line's end).
    In the batch's own last line the key is written with the batch, in one
    write: a torn batch leaves neither."""
    keyed = b""
    if key is not None:
        keyed = b'"key":%s,"digest":"%s",' % (orjson.dumps(key.name), key.digest.hex().encode())
    return b'{"seq":%d,"end":%d,"ts":%s,"crc":%d,%s"event":%s}\n' % (
        seq,
        end,
        repr(ts).encode(),
        zlib.crc32(payload),
        keyed,
        payload,
    )


#: What only the line of a keyed append holds (a key's JSON escapes any quote).
_KEY_FIELD = b'"key":'


def append_keys(data: bytes, offsets: array[int]) -> dict[str, tuple[bytes, int]]:
    """The append keys of a session file's committed lines: ``key -> (digest,
    head after that append)`` (the line that carries a key ends its batch)."""
    keys: dict[str, tuple[bytes, int]] = {}
    start = offsets[0]
    while (found := data.find(_KEY_FIELD, start, offsets[-1])) >= 0:
        line_start = data.rfind(b"\n", 0, found) + 1
        line_end = data.find(b"\n", found) + 1
        try:
            record = orjson.loads(data[line_start:line_end])
        except orjson.JSONDecodeError:
            record = None  # a damaged line: a read reports it, naming its seq
        if isinstance(record, dict) and isinstance(record.get("key"), str):
            keys[record["key"]] = (bytes.fromhex(record["digest"]), int(record["end"]))
        start = line_end
    return keys


def metadata_file(session_id: str, meta: bytes | None, base: int) -> bytes:
    """The whole content of a session's metadata file."""
    header = orjson.dumps({"agentlog": 1, "session": session_id, "base": base})
    body = b"null" if meta is None else meta
    return header + b"\n" + body


#: The start of every event line agentlog writes: seq and end, read without
#: decoding the line (so a damaged payload does not hide them).
_LINE_START = re.compile(rb'\{"seq":(\d+),"end":(\d+),')
_EVENT_KEY = b'"event":'


def line_payload(line: bytes) -> bytes:
    """The event bytes of an event line (its newline, if any, left out)."""
    end = -2 if line.endswith(b"\n") else -1
    return line[line.index(_EVENT_KEY) + 8 : end]


def line_problem(line: bytes) -> str | None:
    """What is wrong with one event line's event: its checksum (when it has one)
    or its decoding; ``None`` when sound."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        try:
            payload = line_payload(line)
        except ValueError:
            return f"unreadable event line ({exc})"
        crc = re.search(rb'"crc":(\d+),"event":', line)
        return payload_problem(payload, int(crc.group(1)) if crc else None) or (
            f"unreadable event line ({exc})"
        )
    if not isinstance(record, dict):
        return "not an event line"
    crc = record.get("crc")
    return payload_problem(line_payload(line), crc if isinstance(crc, int) else None)


def decode_record(session_id: str, seq: int, line: bytes) -> dict[str, Any]:
    """Event line ``seq`` of ``session_id`` decoded; :class:`CorruptDatabaseError`
    naming it when it does not decode."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise damaged_event(session_id, seq, f"unreadable event line ({exc})") from None
    if not isinstance(record, dict):
        raise damaged_event(session_id, seq, "not an event line")
    return record


def parse_session_file(
    data: bytes, name: str, expected_id: str | None = None
) -> tuple[str, array[int]] | None:
    """Read a session file's bytes without changing anything.

    Returns ``(session_id, offsets)`` where ``offsets[k]`` is where event k+1
    starts and ``offsets[-1]`` is the end of the committed log (a torn tail or
    a half-written batch after it is left out), or ``None`` for a file whose
    header never completed (or, with no ``expected_id``, one that is not ours).
    """
    header_end = data.find(b"\n") + 1
    if header_end == 0:
        # The creating append never finished (nothing of it returned); the
        # next append to this id starts the file afresh.
        return None
    try:
        header = orjson.loads(data[:header_end])
        session_id = header["session"]
        valid = header.get("agentlog") == 1 and isinstance(session_id, str)
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        valid = False
    if not valid:
        if expected_id is None:
            return None  # not one of ours; leave it alone
        raise CorruptDatabaseError(f"{name}: not an agentlog session file")
    if expected_id is not None and session_id != expected_id:
        raise CorruptDatabaseError(f"{name} holds session {session_id!r}, not {expected_id!r}")
    offsets = array("q", [header_end])
    find = data.find
    start = header_end
    while True:
        newline = find(b"\n", start)
        if newline < 0:
            break
        start = newline + 1
        offsets.append(start)
    # Leave out a torn tail: complete lines of a batch whose last line is missing.
    while len(offsets) > 1:
        line = data[offsets[-2] : offsets[-1]]
        start_of = _LINE_START.match(line)
        try:
            # A damaged payload still leaves seq and end readable (checked on read).
            if start_of is not None:
                seq, end = int(start_of.group(1)), int(start_of.group(2))
            else:
                record = orjson.loads(line)
                seq, end = record["seq"], record["end"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise CorruptDatabaseError(f"{name}: unreadable event line {len(offsets) - 1}") from exc
        if seq != len(offsets) - 1:
            raise CorruptDatabaseError(f"{name}: line {len(offsets) - 1} holds seq {seq}")
        if seq == end:
            break
        offsets.pop()
    return session_id, offsets


def is_header(line: bytes) -> bool:
    """Whether ``line`` is a session file's header line."""
    try:
        header = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return (
        isinstance(header, dict)
        and header.get("agentlog") == 1
        and isinstance(header.get("session"), str)
    )


def read_metadata_file(data: bytes, name: str, session_id: str) -> tuple[int, bytes]:
    """A session's metadata file (``<session file>`` + :data:`METADATA_SUFFIX`):
    ``(base, metadata json)``; :class:`CorruptDatabaseError` when it is not the
    metadata of ``session_id``. Read-only."""
    header, _, meta = data.partition(b"\n")
    try:
        record = orjson.loads(header)
        valid = (
            isinstance(record, dict)
            and record.get("agentlog") == 1
            and record.get("session") == session_id
            and type(record.get("base")) is int
        )
        orjson.loads(meta)
    except orjson.JSONDecodeError:
        valid = False
    if not valid:
        raise CorruptDatabaseError(f"{name}: not the metadata of session {session_id!r}")
    return record["base"], meta


def session_file_origin(data: bytes, name: str) -> tuple[str, int] | None:
    """The fork origin a session file's header records (see :func:`header_origin`)."""
    return header_origin(data[: data.find(b"\n") + 1], name)


def read_session_file(data: bytes, name: str) -> tuple[str, list[tuple[float, str, bytes]]] | None:
    """A session file's id and committed events as ``(ts, type, payload)``, read-only."""
    parsed = parse_session_file(data, name)
    if parsed is None:
        return None
    session_id, offsets = parsed
    events = []
    for seq in range(1, len(offsets)):
        line = data[offsets[seq - 1] : offsets[seq]]
        problem = line_problem(line)
        if problem is not None:
            raise damaged_event(session_id, seq, f"{name}: {problem}")
        record = orjson.loads(line)
        events.append((float(record["ts"]), str(record["event"]["type"]), line_payload(line)))
    return session_id, events


def _checked_records(
    session_id: str, path: Path, since_seq: int, data: bytes
) -> builtins.list[dict[str, Any]]:
    """The decoded lines of ``data`` (whole event lines read from ``path`` after
    ``since_seq``), each checked against its crc (by the C engine's loop when
    it is built) and its seq; :class:`CorruptDatabaseError` naming the first
    damaged one."""
    if first_bad_crc_line is not None and first_bad_crc_line(data) >= 0:
        # The C engine's loop found a line whose crc does not match.
        raise _first_damaged(session_id, path, since_seq, data[:-1].split(b"\n"))
    try:
        records: builtins.list[dict[str, Any]] = orjson.loads(
            b"[" + data[:-1].replace(b"\n", b",") + b"]"
        )
    except orjson.JSONDecodeError:
        raise _first_damaged(session_id, path, since_seq, data[:-1].split(b"\n")) from None
    if len(records) != data.count(b"\n"):
        raise _first_damaged(session_id, path, since_seq, data[:-1].split(b"\n"))
    if first_bad_crc_line is None:
        _check_crcs(session_id, path, since_seq, data, records)
    for seq, record in enumerate(records, since_seq + 1):
        if record.get("seq") != seq:
            raise CorruptDatabaseError(f"{path}: line {seq} holds seq {record.get('seq')}")
    return records


def decode_page(session_id: str, path: Path, since_seq: int, data: bytes) -> list[StoredEvent]:
    """The events of ``data``: whole event lines read from ``path`` after
    ``since_seq``, checked (see :func:`_checked_records`)."""
    events = []
    for seq, record in enumerate(
        _checked_records(session_id, path, since_seq, data), since_seq + 1
    ):
        event = record["event"]
        events.append(_new_stored(StoredEvent, (seq, seq - 1, record["ts"], event["type"], event)))
    return events


def raw_page(session_id: str, path: Path, since_seq: int, data: bytes) -> list[RawEvent]:
    """:func:`decode_page` with each event's bytes as the line holds them (the
    lines are still decoded once, for the check and each event's type)."""
    records = _checked_records(session_id, path, since_seq, data)
    find = bytes.find
    lines = data[:-1].split(b"\n")
    return [
        RawEvent(
            seq,
            seq - 1,
            record["ts"],
            record["event"]["type"],
            # A line's crc vouches for the slice; a line without one (written
            # before checksums, or by hand, its keys in any order) is encoded.
            line[find(line, _EVENT_KEY, 20) + 8 : -1]
            if record.get("crc") is not None
            else orjson.dumps(record["event"]),
        )
        for seq, (record, line) in enumerate(zip(records, lines, strict=True), since_seq + 1)
    ]


def _check_crcs(
    session_id: str, path: Path, since_seq: int, data: bytes, records: builtins.list[Any]
) -> None:
    """Each line's event bytes against its crc, in Python (without the C engine):
    two lists compared (their loops in C); a page that differs anywhere (damage,
    or lines written before checksums) is looked at line by line."""
    lines = data[:-1].split(b"\n")
    find = bytes.find
    payloads = [line[find(line, _EVENT_KEY, 20) + 8 : -1] for line in lines]
    if list(map(zlib.crc32, payloads)) != [record.get("crc") for record in records]:
        for record, payload in zip(records, payloads, strict=True):
            crc = record.get("crc")
            if crc is not None and zlib.crc32(payload) != crc:
                raise _first_damaged(session_id, path, since_seq, lines)


def _first_damaged(
    session_id: str, path: Path, since_seq: int, lines: builtins.list[bytes]
) -> CorruptDatabaseError:
    """The error naming the first damaged line of a page (read after ``since_seq``)."""
    for seq, line in enumerate(lines, since_seq + 1):
        problem = line_problem(line)
        if problem is not None:
            return damaged_event(session_id, seq, f"{path}: {problem}")
    return CorruptDatabaseError(f"{path}: the page's lines do not decode one to one")
