"""What is wrong with a file store's files: the checks behind ``check_integrity``.

Each reads one file as :func:`.ownership.read_regular` opens it and changes
nothing; a file that is not agentlog's is left out, as ``list()`` leaves it out.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from ...errors import CorruptDatabaseError
from ...integrity import DamagedEvent
from .format import line_problem, parse_session_file, read_metadata_file, session_file_origin
from .ownership import is_regular, read_regular

__all__ = ["check_metadata_file", "check_session_file", "damaged_lines"]


def damaged_lines(path: Path) -> list[DamagedEvent]:
    """Every damaged event line of one session file (a deep check); a file that
    cannot be read or parsed at all is left to :func:`check_session_file`."""
    try:
        data, _ = read_regular(path)
        parsed = parse_session_file(data, str(path))
    except (OSError, CorruptDatabaseError):
        return []
    if parsed is None:
        return []
    session_id, offsets = parsed
    damaged = []
    for seq in range(1, len(offsets)):
        problem = line_problem(data[offsets[seq - 1] : offsets[seq]])
        if problem is not None:
            damaged.append(DamagedEvent("", session_id, seq, problem))
    return damaged


def check_session_file(path: Path) -> str | None:
    """What is wrong with one session file, or ``None``."""
    if not is_regular(path):
        return None  # not one of ours (agentlog writes regular files only)
    try:
        data, _ = read_regular(path)
    except (FileNotFoundError, CorruptDatabaseError):
        return None  # deleted meanwhile, or replaced by what is not ours
    except OSError as exc:
        return f"cannot read {path}: {exc}"
    try:
        parsed = parse_session_file(data, str(path))
        if parsed is None:
            return None
        _, offsets = parsed
        session_file_origin(data, str(path))  # a fork's origin, if any, must be whole
        for seq in range(1, len(offsets)):
            record = orjson.loads(data[offsets[seq - 1] : offsets[seq]])
            event = record.get("event") if isinstance(record, dict) else None
            if not isinstance(event, dict) or record.get("seq") != seq:
                return f"{path}: line {seq} is not event {seq}"
            if not isinstance(event.get("type"), str):
                return f"{path}: event {seq} has no type"
    except CorruptDatabaseError as exc:
        return str(exc)
    except orjson.JSONDecodeError:
        return f"{path}: unreadable event line {seq}"
    return None


def check_metadata_file(path: Path) -> str | None:
    """What is wrong with a metadata file, or None."""
    try:
        data, _ = read_regular(path)
    except (FileNotFoundError, CorruptDatabaseError):
        return None  # deleted meanwhile, or not ours
    except OSError as exc:
        return f"cannot read {path}: {exc}"
    try:
        header = orjson.loads(data.partition(b"\n")[0])
        session_id = header.get("session") if isinstance(header, dict) else None
    except orjson.JSONDecodeError:
        session_id = None
    try:
        read_metadata_file(data, str(path), session_id if isinstance(session_id, str) else "")
    except CorruptDatabaseError as exc:
        return str(exc)
    return None
