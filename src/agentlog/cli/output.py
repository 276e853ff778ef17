"""What a command prints: results made safe for a terminal, and mistakes as one line."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

from ..events import StoredEvent
from ..terminal import inert, inert_json, screen_for

__all__ = [
    "UsageError",
    "counted",
    "event_json",
    "fail",
    "print_event",
    "print_json",
    "print_transcript",
    "safe",
]


# Stored content and ids come from models, tools and whoever wrote the store:
# they are shown, never obeyed (terminal.inert escapes what a terminal acts on).
safe = inert


class UsageError(Exception):
    """A mistake in how the command was called: reported as one line, exit status 2."""

    def __init__(self, message: str, prog: str | None = None) -> None:
        super().__init__(message)
        self.prog = prog


def print_transcript(messages: list[dict[str, Any]], indent: str = "  ") -> None:
    """Print folded messages as a transcript, each line after ``indent``."""
    screen_for(sys.stdout).transcript(messages, indent)


def print_event(event: StoredEvent) -> None:
    """Print one stored event, as ``show --raw`` and ``tail`` do."""
    screen_for(sys.stdout).events([event])


def print_json(value: Any, indent: int | None = None) -> None:
    """Print ``value`` as one JSON document (inert on a terminal)."""
    print(inert_json(json.dumps(value, ensure_ascii=False, indent=indent)))


def event_json(event: StoredEvent) -> dict[str, Any]:
    """A stored event as the JSON object ``--json`` prints."""
    return event._asdict()


def counted(count: int, noun: str) -> str:
    """``1 session``, ``2,000 sessions``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def fail(prog: str, message: str) -> NoReturn:
    """Report a mistake as one line on standard error; exit status 2."""
    print(f"{prog}: error: {safe(' '.join(message.split()))}", file=sys.stderr)
    raise SystemExit(2)
