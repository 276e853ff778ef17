"""Events, their validation and their JSON encoding.

The codec is ``orjson``: on the benchmark workload (~500-byte agent events) it
encodes in about a quarter and decodes in about a third of the time of the
standard library's ``json`` (figures in the README). It has two gaps that are
closed here: it writes NaN and Infinity as ``null`` instead of refusing them,
and it silently converts ``datetime`` values and dataclasses. The latter are
passed through to a ``default`` that refuses them; the former is caught by
re-checking, with the standard library's strict encoder, any event whose
encoding contains ``null`` (rare, and only then is the slower check paid).
"""

from __future__ import annotations

import hashlib
import json
import numbers
import re
import time
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, NoReturn

import orjson

from .errors import (
    EventsPrunedError,
    IdempotencyKeyError,
    InvalidEventError,
    InvalidSessionIdError,
    StorageDataError,
    UnserializableEventError,
)

__all__ = [
    "EVENT_TYPES",
    "MAX_EVENT_BYTES",
    "MAX_POSITION",
    "MAX_SESSION_ID_LENGTH",
    "REQUIRED_FIELDS",
    "AppendKey",
    "Fork",
    "ForkOrigin",
    "RawEvent",
    "SessionEvent",
    "SessionInfo",
    "SessionListing",
    "SessionMetadata",
    "StoredEvent",
    "check_flag",
    "check_poll_interval",
    "check_seq",
    "check_session_id",
    "sorted_forks",
    "store_events",
    "to_session_id",
]

#: The canonical event types; anything else is refused.
EVENT_TYPES: frozenset[str] = frozenset(
    {
        "user",
        "assistant",
        "tool_started",
        "tool_result",
        "file_snapshot",
        "artifact_verified",
        "permission_decision",
        "summary",
        "context_view",
    }
)

#: The fields an event of each type must have (present, and not ``None``):
#: what folding reads. Types not listed need only ``type``.
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "user": ("content",),
    "assistant": ("content",),
    "summary": ("content",),
    "tool_result": ("tool_use_id",),
    "tool_started": ("tool_use_id",),
}

#: The longest session id accepted, in characters.
MAX_SESSION_ID_LENGTH = 255

#: A session event as appended: a JSON-serialisable mapping with a ``type`` key.
SessionEvent = Mapping[str, Any]


class StoredEvent(NamedTuple):
    """An event as stored: immutable, a tuple underneath, cheap to create.

    ``event`` is the appended mapping after a JSON round trip (tuples become
    lists); every read returns fresh objects, so changing ``event`` never
    changes the log.
    """

    seq: int
    """Position in the session, 1, 2, 3 … with no gaps."""
    parent_seq: int
    """The seq this event follows (``seq - 1``); 0 for the first event."""
    ts: float
    """When the event was appended, in seconds since the epoch."""
    type: str
    """The event's ``type`` field."""
    event: dict[str, Any]
    """The event mapping itself, ``type`` included."""


class RawEvent(NamedTuple):
    """An event as stored, its JSON not decoded: what ``read_json`` yields.

    ``json`` is the event's payload exactly as the store holds it (compact
    JSON, one object, ``type`` included), already checked against its
    checksum; a server that only passes events on writes it out as it is.
    """

    seq: int
    """Position in the session, 1, 2, 3 … with no gaps."""
    parent_seq: int
    """The seq this event follows (``seq - 1``); 0 for the first event."""
    ts: float
    """When the event was appended, in seconds since the epoch."""
    type: str
    """The event's ``type`` field."""
    json: bytes
    """The event mapping's stored JSON bytes."""


class SessionInfo(NamedTuple):
    """One row of :meth:`Checkpointer.list`."""

    id: str
    """The session id."""
    mtime: float
    """When the session last changed (append, truncate, fork), epoch seconds."""
    head: int
    """The seq of the last event; 0 for an empty session."""


class ForkOrigin(NamedTuple):
    """Where a fork came from, as :meth:`~agentlog.BaseCheckpointer.lineage` reads it."""

    session_id: str
    """The id of the session it was forked from (that session may since have
    been deleted, truncated below ``seq``, or re-created under the same id)."""
    seq: int
    """The seq of the source it was forked at: it began with the source's events 1..seq."""


class Fork(NamedTuple):
    """One fork of a session, as :meth:`~agentlog.BaseCheckpointer.forks` lists them."""

    session_id: str
    """The fork's id."""
    seq: int
    """The seq of the source it was forked at."""


def sorted_forks(found: Iterable[tuple[str, int]]) -> list[Fork]:
    """``(fork id, seq)`` pairs as :class:`Fork` rows, by seq and then id (the
    order every backend's ``forks()`` answers in)."""
    return [Fork(name, seq) for seq, name in sorted((seq, name) for name, seq in found)]


class SessionMetadata(NamedTuple):
    """A session's metadata and its revision, as :meth:`Checkpointer.metadata` reads them."""

    value: Any
    """The JSON value set last (``None`` until one is set)."""
    revision: int
    """The session's revision: 0 for a session that does not exist; every write
    to the session (an append, a truncate, a metadata change) advances it."""


class SessionListing(NamedTuple):
    """One row of ``list(with_metadata=True)``: :class:`SessionInfo` plus metadata."""

    id: str
    """The session id."""
    mtime: float
    """When the session last changed, epoch seconds."""
    head: int
    """The seq of the last event; 0 for an empty session."""
    metadata: Any
    """The session's metadata value (``None`` until one is set)."""
    revision: int
    """The session's revision (see :class:`SessionMetadata`)."""


#: The format characters an identifier may hold: the joiners inside emoji and
#: Indic sequences (ZWNJ, ZWJ) and the tag characters of flag sequences. Every
#: other format character — bidirectional controls, zero-width spaces, the
#: byte order mark, the soft hyphen — can hide or reorder what a reader sees.
_ID_FORMAT_ALLOWED = frozenset(["\u200c", "\u200d"] + [chr(c) for c in range(0xE0020, 0xE0080)])
#: Never in an identifier: controls, surrogates, line and paragraph separators.
_ID_REFUSED_CATEGORIES = frozenset(["Cc", "Cs", "Zl", "Zp"])


def _id_character_allowed(char: str) -> bool:
    category = unicodedata.category(char)
    if category == "Cf":
        return char in _ID_FORMAT_ALLOWED
    return category not in _ID_REFUSED_CATEGORIES


def check_identifier(
    value: object, what: str = "session id", error: type[Exception] = InvalidSessionIdError
) -> str:
    """Return ``value`` if it is a safe identifier, else raise ``error``.

    A safe identifier is a ``str`` of 1 to :data:`MAX_SESSION_ID_LENGTH`
    characters, without ``/`` or ``\\``, and not ``.`` or ``..``, made of
    what people write: any letter, digit, symbol or space of any script
    (``周报　八月`` with its ideographic space), emoji sequences with their
    joiners (``👩\u200d💻-pairing``). Refused: control characters (NUL, ESC,
    newline, tab …), surrogates, line and paragraph separators, and format
    characters other than the joiners and emoji tags (so no bidirectional
    override, zero-width space or byte order mark), so an identifier can
    neither escape a directory, nor break a key or a log line in any backend,
    nor show a reader something other than what it is.
    """
    if type(value) is not str:
        if isinstance(value, str):
            value = str(value)
        else:
            raise error(f"{what} must be a str, not {type(value).__name__}")
    if not 0 < len(value) <= MAX_SESSION_ID_LENGTH:
        raise error(f"{what} must have 1 to {MAX_SESSION_ID_LENGTH} characters, got {len(value)}")
    if (
        "/" in value
        or "\\" in value
        or value in (".", "..")
        or not (value.isprintable() or all(map(_id_character_allowed, value)))
    ):
        raise error(
            f"{what} {value[:60]!r} is not allowed: no control, surrogate, separator or "
            "bidirectional characters, no '/' or '\\', and not '.' or '..'"
        )
    return value


def to_session_id(text: str) -> str:
    """``text`` itself when it is a valid session id, else a valid id made from
    it deterministically: each refused character (a control, a surrogate, a
    separator, a bidirectional or invisible format character, ``/``, ``\\``)
    becomes ``_``, the result is cut to fit, and ``~`` plus the first 12 hex
    digits of the sha256 of ``text`` (UTF-8, surrogates as they are) is
    appended — so two different texts never share an id by accident, and the
    same text always gets the same one."""
    if type(text) is not str:
        raise InvalidSessionIdError(f"session id must be a str, not {type(text).__name__}")
    try:
        return check_identifier(text)
    except InvalidSessionIdError:
        pass
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    kept = "".join(
        char if char not in "/\\" and _id_character_allowed(char) else "_"
        for char in text[: MAX_SESSION_ID_LENGTH - 13]
    )
    return f"{kept}~{digest}"


def check_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is a safe session id, else raise
    :class:`InvalidSessionIdError` (see :func:`check_identifier` for the rules)."""
    # The common case without a call: a plain, valid id.
    if (
        type(session_id) is str
        and session_id.isprintable()
        and 0 < len(session_id) <= MAX_SESSION_ID_LENGTH
        and "/" not in session_id
        and "\\" not in session_id
        and session_id not in (".", "..")
    ):
        return session_id
    return check_identifier(session_id)


_DUMPS_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_strict_dumps = json.JSONEncoder(allow_nan=False, check_circular=True).encode
_dumps = orjson.dumps
decode_json = orjson.loads
# Whether an encoding holds ``null`` (where orjson wrote NaN or Infinity): the
# regular expression's literal search scans an event in about two thirds of
# the time of ``b"null" in payload``, and this check runs on every event.
_holds_null = re.compile(b"null").search


def _refuse(value: object) -> NoReturn:
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def encode_json(value: object) -> bytes:
    """``value`` as compact JSON bytes.

    Raises ``TypeError`` for what JSON cannot hold (sets, bytes, objects,
    non-string keys, integers beyond 64 bits, cycles) and ``ValueError`` for
    NaN and Infinity.
    """
    try:
        payload = _dumps(value, default=_refuse, option=_DUMPS_OPTIONS)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        raise TypeError(f"cannot be encoded as JSON: {exc}") from None
    if _holds_null(payload) is not None:
        try:
            _strict_dumps(value)
        except ValueError as exc:
            raise ValueError(f"cannot be encoded as JSON: {exc}") from None
    return payload


def _encode_one(index: int, event: object) -> tuple[str, bytes]:
    if type(event) is not dict:
        if not isinstance(event, Mapping):
            raise UnserializableEventError(index, f"expected a mapping, got {type(event).__name__}")
        try:
            event = dict(event)
        except (LookupError, TypeError, ValueError, AttributeError, RuntimeError) as exc:
            # A mapping whose keys() and items disagree, or that fails while read.
            raise UnserializableEventError(
                index, f"the mapping could not be read: {type(exc).__name__}: {exc}"
            ) from None
    assert isinstance(event, dict)
    event_type = event.get("type")
    if type(event_type) is not str or event_type not in EVENT_TYPES:
        raise InvalidEventError(
            index,
            f"unknown event type {event_type!r}; expected one of " + ", ".join(sorted(EVENT_TYPES)),
        )
    for field in REQUIRED_FIELDS.get(event_type, ()):
        if event.get(field) is None:
            raise InvalidEventError(index, f"a {event_type!r} event needs a {field!r} field")
    try:
        payload = encode_json(event)
    except TypeError as exc:
        raise UnserializableEventError(index, str(exc)) from None
    except ValueError as exc:
        raise InvalidEventError(index, str(exc)) from None
    return event_type, payload


# The hot path's lookup: the one field a type needs, or None (no type needs more).
assert all(len(fields) == 1 for fields in REQUIRED_FIELDS.values())
_REQUIRED_FIELD_GET = {kind: fields[0] for kind, fields in REQUIRED_FIELDS.items()}.get


# orjson's bytes keep the ~4 KiB buffer it encoded into, whatever the event's
# size: a batch of a million small events held 4 GB until it was written.
# From the 16th event of a batch on, each encoding is copied into bytes of its
# own size (~0.1 µs), so a batch's memory follows its encoded size; the first
# ones, all a one-event append ever has, are left as they are (a few KiB).
# ``b"%b" % payload`` makes that copy in less than half the time of
# ``bytes(memoryview(payload))``.
_EXACT_FROM = 16

#: The largest event, encoded, that any backend takes: what SQLite stores in
#: one value (its SQLITE_MAX_LENGTH), and less than PostgreSQL's 1 GiB.
MAX_EVENT_BYTES = 1_000_000_000


def _oversized(index: int, size: int) -> InvalidEventError:
    return InvalidEventError(
        index, f"it is {size:,} bytes encoded, more than the {MAX_EVENT_BYTES:,} an event can be"
    )


#: A batch of events as backends receive it: validated ``(type, json_bytes)`` pairs.
EncodedBatch = list[tuple[str, bytes]]


def encode_events(events: Iterable[SessionEvent]) -> EncodedBatch:
    """Validate and encode events to ``(type, json_bytes)`` pairs.

    Raises :class:`InvalidEventError` (a ``ValueError``) or
    :class:`UnserializableEventError` (also a ``TypeError``) naming the index
    of the first offending event.
    """
    # A list (what nearly every caller passes) needs no look at the ABCs,
    # which cost a one-event append more than encoding its event.
    if type(events) is not list and (
        isinstance(events, (Mapping, str, bytes)) or not isinstance(events, Iterable)
    ):
        raise TypeError(f"events must be a list of event mappings, not {type(events).__name__}")
    encoded: list[tuple[str, bytes]] = []
    add = encoded.append
    for index, event in enumerate(events):
        # The common case inline: a dict of a known type whose encoding holds
        # no null (so no NaN either). Anything else takes the careful path.
        payload = None
        if type(event) is dict:
            given = event.get("type")
            if type(given) is str and given in EVENT_TYPES:
                field = _REQUIRED_FIELD_GET(given)
                if field is None or event.get(field) is not None:
                    try:
                        encoded_event = _dumps(event, default=_refuse, option=_DUMPS_OPTIONS)
                    except TypeError:
                        pass
                    else:
                        if _holds_null(encoded_event) is None:
                            kind, payload = given, encoded_event
        if payload is None:
            kind, payload = _encode_one(index, event)
        if len(payload) > MAX_EVENT_BYTES:
            raise _oversized(index, len(payload))
        if index >= _EXACT_FROM:
            payload = b"%b" % payload
        add((kind, payload))
    return encoded


# Each event type's part of the digest's header: ``len(kind):kind``.
_KIND_HEADERS = {kind: b"%d:%s" % (len(kind), kind.encode()) for kind in EVENT_TYPES}


class AppendKey(NamedTuple):
    """An append's idempotency key, checked, with the digest of its events.

    "The same events" means the same number of events, each of the same type
    with an equal JSON value: the digest is BLAKE2b (16 bytes) over each
    event's ``len(type):type len(json):json``, where ``json`` is its payload
    decoded and re-encoded with sorted keys, so the order of a mapping's keys
    does not count, and nothing else about the events (their values, their
    order) may differ. It is stored with the key.
    """

    name: str
    digest: bytes

    @classmethod
    def of(cls, key: object, batch: EncodedBatch) -> AppendKey:
        """The key of ``batch``: :class:`StorageDataError` unless ``key`` is a
        safe identifier (a session id's rules, up to
        :data:`MAX_SESSION_ID_LENGTH` characters; see :func:`check_identifier`)."""
        name = check_identifier(key, "append key", StorageDataError)
        digest = hashlib.blake2b(digest_size=16)
        for kind, data in batch:
            canonical = _dumps(decode_json(data), option=orjson.OPT_SORT_KEYS)
            header = _KIND_HEADERS.get(kind) or b"%d:%s" % (len(kind), kind.encode())
            # One update an event: the header and the JSON, in one buffer.
            digest.update(b"%b%d:%b" % (header, len(canonical), canonical))
        return cls(name, digest.digest())

    def replay(self, session_id: str, digest: bytes, head: int) -> int:
        """The result of a repeat of the append first stored as ``(digest, head)``:
        ``head`` when it carried the same events, else :class:`IdempotencyKeyError`."""
        if bytes(digest) != self.digest:
            raise IdempotencyKeyError(session_id, self.name)
        return head


def decode_payload(payload: bytes | str) -> dict[str, Any]:
    """Decode a stored event payload."""
    value = decode_json(payload)
    if type(value) is not dict:
        raise ValueError("stored event payload is not a JSON object")
    return value


def encode_storable(value: object, what: str) -> bytes:
    """A stored JSON value as bytes; :class:`StorageDataError` naming ``what``
    (``"metadata"``, ``"value"``) when JSON cannot hold it."""
    try:
        return encode_json(value)
    except (TypeError, ValueError) as exc:
        raise StorageDataError(f"{what} {exc}") from None


def encode_metadata(value: object) -> bytes:
    """A metadata value as JSON bytes; :class:`StorageDataError` when JSON cannot hold it."""
    return encode_storable(value, "metadata")


#: The largest seq, head or revision any backend can hold (a signed 64-bit
#: integer); a larger one is refused before it reaches a database driver.
MAX_POSITION = (1 << 63) - 1


def check_seq(name: str, value: object) -> int:
    """Return ``value`` if it is an ``int`` (not a bool) from 0 to
    :data:`MAX_POSITION`, else raise ``TypeError`` / ``ValueError``."""
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        value = int(value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    if value > MAX_POSITION:
        raise ValueError(f"{name} must be at most {MAX_POSITION}, got {value}")
    return value


def check_flag(name: str, value: object) -> bool:
    """Return ``value`` if it is a ``bool``, else raise ``TypeError`` (a truthy
    string such as ``"no"`` is not taken for yes)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def check_poll_interval(value: object) -> float:
    """A follower's poll interval: seconds as a real number > 0 (``inf``
    allowed), else ``TypeError`` / ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"poll_interval must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not seconds > 0:  # NaN too
        raise ValueError(f"poll_interval must be > 0, not {value!r}")
    return seconds


def idle_cutoff(idle_for: object) -> float:
    """Retention's cut-off for ``delete_idle(idle_for)``: the time ``idle_for``
    seconds (a number >= 0) ago, else ``TypeError`` / ``ValueError``."""
    if isinstance(idle_for, bool) or not isinstance(idle_for, (int, float)):
        raise TypeError("idle_for must be a number of seconds")
    if not idle_for >= 0:
        raise ValueError(f"idle_for must be >= 0, not {idle_for!r}")
    return time.time() - idle_for


def check_retained(
    session_id: str, what: str, point: int, first: int, oldest_snapshot: int | None
) -> None:
    """Refuse to ``what`` (truncate, fork) a pruned session back to ``point``
    below what retention left: :class:`EventsPrunedError`.

    ``first`` is the session's first stored seq (``head + 1`` when it holds
    none); below ``first - 1`` the events are gone, and below its oldest
    snapshot (which covers the pruned ones) ``load()`` could no longer
    rebuild the session. A session retention never pruned (``first`` 1)
    goes back anywhere. Every backend's truncate and fork ask this inside
    their write transaction.
    """
    if first <= 1:
        return
    lowest = max(first - 1, oldest_snapshot or 0)
    if point < lowest:
        raise EventsPrunedError(
            session_id,
            point,
            first,
            f"cannot {what} it to {point}: the earliest point left is {lowest}"
            + (" (its oldest snapshot)" if lowest > first - 1 else ""),
        )


def store_events(
    session_id: str,
    from_seq: int,
    events: Iterable[SessionEvent],
    ts: float | None = None,
) -> list[StoredEvent]:
    """Stamp ``seq`` / ``parent_seq`` / ``ts`` on events appended after ``from_seq``.

    The building block for a custom backend: it validates the id and every
    event exactly as the built-in backends do, and the returned events hold
    JSON round-tripped copies, so later changes to the caller's mappings do
    not reach the log.

        >>> [e.seq for e in store_events("s", 3, [{"type": "user", "content": "hi"}])]
        [4]
    """
    check_session_id(session_id)
    from_seq = check_seq("from_seq", from_seq)
    encoded = encode_events(events)
    stamp = time.time() if ts is None else float(ts)
    return [
        StoredEvent(from_seq + i, from_seq + i - 1, stamp, event_type, decode_json(payload))
        for i, (event_type, payload) in enumerate(encoded, 1)
    ]
