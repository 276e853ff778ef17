"""JSON v1 session files: how each becomes a session, losing nothing.

A JSON v1 file (``sessions/X.json``: ``{"version": 1, "id", "messages",
"runs", ...header}``) was written by a JavaScript producer; what it may hold
and Python's strict JSON may not (lone surrogates, integers beyond 64 bits)
is kept as exact JSON text beside a readable stand-in, ids agentlog cannot
take get a deterministic stand-in, and the file's own times are kept.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ..errors import StorageDataError
from ..events import encode_events, encode_json, to_session_id
from ..log import message_event
from ..stores.common import encode_value
from .common import SOURCE_FORMATS, Converted, Event, MigrationError

__all__ = ["convert_json_v1", "epoch_seconds", "keep_exact", "legacy_value"]

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_INT64_MIN, _UINT64_MAX = -(1 << 63), (1 << 64) - 1


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond the range of a JSON number")
    return value


def _json_v1(data: bytes, key: str) -> dict[str, Any]:
    try:
        # NaN and Infinity are not JSON: refused here, as the apply's encoder would.
        document = json.loads(data, parse_constant=_not_json, parse_float=_finite)
    except ValueError as exc:
        raise MigrationError(f"{key}: not valid JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("version") != 1:
        raise MigrationError(f"{key}: not a JSON v1 session file (version must be 1)")
    if not isinstance(document.get("messages"), list):
        raise MigrationError(f"{key}: 'messages' must be a list")
    if not isinstance(document.get("runs", []), list):
        raise MigrationError(f"{key}: 'runs' must be a list")
    if not isinstance(document.get("id"), str):
        raise MigrationError(f"{key}: 'id' must be a string")
    return document


def _readable(value: Any) -> Any:
    """``value`` with what agentlog's JSON cannot hold replaced: a lone
    surrogate by U+FFFD, an integer beyond 64 bits by the float JavaScript
    read it as (its digits as a string if even a float cannot hold it)."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_readable(item) for item in value]
    if isinstance(value, dict):
        return {_readable(k): _readable(v) for k, v in value.items()}
    if type(value) is int and not _INT64_MIN <= value <= _UINT64_MAX:
        try:
            return float(value)
        except OverflowError:
            return str(value)
    return value


def keep_exact(value: Any) -> tuple[Any, str | None]:
    """``(value, None)`` when agentlog's JSON holds ``value`` exactly; else
    ``(a readable stand-in, the exact JSON text of value)``.

    What JSON v1 files may hold and agentlog's JSON cannot: lone surrogates
    (JavaScript strings may carry them; ``JSON.stringify`` writes ``\\ud800``)
    and integers beyond 64 bits. The text is ASCII, with those written as
    JSON escapes and digits, so ``json.loads`` (or ``JSON.parse``) gives the
    original back exactly.
    """
    try:
        encode_json(value)
    except TypeError:
        return _readable(value), json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return value, None


def legacy_value(record: Mapping[str, Any]) -> Any:
    """The original JSON v1 value a migrated record keeps: ``legacy_json``
    parsed when the record has it (the exact text of a value agentlog's JSON
    cannot hold), else ``legacy``. ``record`` is a migrated event or a
    migrated session's metadata."""
    text = record.get("legacy_json")
    return json.loads(text) if isinstance(text, str) else record.get("legacy")


def epoch_seconds(value: object) -> float | None:
    """A JSON v1 time as seconds since the epoch: an ISO 8601 string (``Z`` or
    an offset; none means UTC) or a number (milliseconds, as JavaScript's
    ``Date.now()``, when above 1e11, else seconds); ``None`` for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
        if not math.isfinite(number) or number <= 0:
            return None
        return number / 1000 if number > 1e11 else number
    if isinstance(value, str):
        text = value.strip()
        if text[-1:] in ("Z", "z"):
            text = text[:-1] + "+00:00"
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return moment.timestamp()
    return None


def _time_of(value: object, fields: tuple[str, ...]) -> float | None:
    if isinstance(value, dict):
        for name in fields:
            moment = epoch_seconds(value.get(name))
            if moment is not None:
                return moment
    return None


#: Where a JSON v1 message, a run and the header keep their times.
_MESSAGE_TIMES = ("createdAt", "timestamp", "ts", "time")
_RUN_TIMES = ("createdAt", "startedAt", "updatedAt", "completedAt")
_CREATED = ("createdAt",)
_LAST_ACTIVE = ("lastActiveAt", "updatedAt")


def convert_json_v1(data: bytes, key: str, file_time: float) -> Converted:
    """A JSON v1 session file converted exactly as the apply writes it;
    :class:`MigrationError` for a file the apply would refuse. ``file_time``
    (the file's modification time) stands in where the file holds no time."""
    document = _json_v1(data, key)
    original_id: str = document["id"]
    session_id = to_session_id(original_id)
    source = {"format": SOURCE_FORMATS["json-v1"], "key": key}
    notes = []
    if session_id != original_id:
        source["id"] = original_id
        notes.append(f"id {_LONE_SURROGATE.sub('?', original_id)!r} is stored as {session_id!r}")
    messages: list[Any] = document["messages"]
    runs: list[Any] = document.get("runs", [])
    header = {k: v for k, v in document.items() if k not in ("messages", "runs")}

    own_times = [_time_of(message, _MESSAGE_TIMES) for message in messages]
    known = [t for t in own_times if t is not None]
    known += [t for run in runs if (t := _time_of(run, _RUN_TIMES)) is not None]
    active = _time_of(header, _LAST_ACTIVE)
    created = _time_of(header, _CREATED)
    if created is None:
        created = min(known, default=active if active is not None else file_time)
    if active is None:
        active = max([created, *known])

    events: list[Event] = []
    exact = 0
    moment = created
    for index, (message, own_time) in enumerate(zip(messages, own_times, strict=True)):
        moment = own_time if own_time is not None else moment
        type_, payload, needed_text = _json_v1_event(message, index, key)
        exact += needed_text
        events.append((moment, type_, payload, f"v1-{index}"))
    legacy, legacy_json = keep_exact({"header": header, "runs": runs})
    metadata: dict[str, Any] = {"legacy": legacy, "source": source}
    if legacy_json is not None:
        metadata["legacy_json"] = legacy_json
        exact += 1
    if exact:
        notes.append(f"{exact} value(s) kept as exact JSON text (legacy_json)")
    try:
        encoded = encode_value(metadata)
    except StorageDataError as exc:
        raise MigrationError(f"{key}: {exc}") from None
    renamed = original_id if session_id != original_id else None
    revision = 1 if events else 0  # an empty session was never written to
    return Converted(session_id, renamed, events, encoded, created, active, revision, tuple(notes))


def _json_v1_event(message: Any, index: int, key: str) -> tuple[str, bytes, bool]:
    """(type, payload, whether it needed legacy_json) for message ``index``."""
    readable, exact = keep_exact(message)
    event = message_event(readable)
    if event is None:
        role = message.get("role") if isinstance(message, dict) else None
        raise MigrationError(f"{key}: message {index} has no known role ({role!r})")
    event.update({"id": f"v1-{index}", "legacy": readable})
    if exact is not None:
        event["legacy_json"] = exact
    try:
        ((kind, payload),) = encode_events([event])
    except ValueError as exc:
        raise MigrationError(f"{key}: message {index}: {exc}") from None
    return kind, payload, exact is not None
