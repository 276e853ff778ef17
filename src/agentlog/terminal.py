"""How the command line shows things on a terminal.

Piped or redirected, the output is plain text (and ``--json`` exact JSON), the
same on every machine. On a terminal, with the ``cli`` extra installed
(``pip install "agentlog[cli]"``, which brings `rich`_), transcripts are
coloured by role with each tool call and result on a line of its own,
session lists are tables, and long operations show a progress bar.
``NO_COLOR`` (any value) or ``TERM=dumb`` keeps a terminal plain.

Whatever the output, text that came from a store — content, ids, tool
output — is shown, never obeyed: :func:`inert` writes every control and
bidirectional character as a visible escape before anything renders it, and
rich is told not to read markup or emoji codes in it.

.. _rich: https://github.com/Textualize/rich
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

from .fold import TEXT_BLOCK_TYPES

__all__ = ["Screen", "inert", "inert_json", "progress_bar", "screen_for"]

# What a terminal acts on rather than shows: C0 controls (ESC, BEL, CR, …), DEL,
# C1 controls (a one-code-point CSI or OSC), the line and paragraph separators
# and the bidirectional marks and overrides.
_ACTED_ON = "\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x1f{_ACTED_ON}]")
# In JSON text, C0 is escaped by the encoder already.
_UNSAFE_IN_JSON = re.compile(f"[{_ACTED_ON}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def inert(text: str) -> str:
    """``text`` with every control and bidirectional character written as a
    visible escape (``\\x1b``, ``\\u202e``, ``\\n``): one inert line."""
    return _UNSAFE.sub(_escape, text)


def inert_json(text: str) -> str:
    """JSON ``text`` with the characters :func:`inert` escapes written as
    ``\\uXXXX``: exact JSON still (they can only occur in strings, and the
    escape decodes to the same value), and inert on a terminal."""
    return _UNSAFE_IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def _short(value: Any, width: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = inert(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def rich_available() -> bool:
    """Whether rich (the ``cli`` extra) is installed."""
    return importlib.util.find_spec("rich") is not None


def colour_wanted(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal that should get colour: it is a
    terminal, ``NO_COLOR`` is unset, ``TERM`` is not ``dumb``, and rich is
    installed."""
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return (
        terminal
        and "NO_COLOR" not in os.environ
        and os.environ.get("TERM") != "dumb"
        and rich_available()
    )


#: The style of each role in a coloured transcript.
_ROLE_STYLES = {"user": "bold cyan", "assistant": "bold green", "tool": "bold yellow"}


class Screen:
    """Where a command's human-readable output goes: coloured through rich on
    a terminal, plain otherwise (see the module's docstring)."""

    def __init__(self, stream: TextIO, colour: bool) -> None:
        self.stream = stream
        self.colour = colour
        self._console: Any = None
        if colour:
            from rich.console import Console

            # No markup, emoji codes or highlighting: stored text is shown as it is.
            self._console = Console(
                file=stream, markup=False, emoji=False, highlight=False, soft_wrap=True
            )

    def _line(self, *parts: tuple[str, str]) -> None:
        """One line from ``(text, style)`` parts; the texts are already inert."""
        from rich.text import Text

        self._console.print(Text.assemble(*parts))

    # -- transcripts -----------------------------------------------------------------

    def transcript(self, messages: Iterable[dict[str, Any]], indent: str = "") -> None:
        """Folded messages: one line per message when plain; on a terminal, the
        role in colour and each tool call, tool result and thinking block on a
        line of its own."""
        for message in messages:
            role = inert(str(message.get("role")))
            if not self.colour:
                content = _short(_plain_content(message.get("content")), 90)
                print(f"{indent}{role:>9}: {content}", file=self.stream)
                continue
            style = _ROLE_STYLES.get(role, "bold")
            for n, (text, text_style) in enumerate(_message_lines(message)):
                label = f"{role:>9}" if n == 0 else " " * 9
                self._line((indent, ""), (label, style), ("  ", ""), (text, text_style))

    def events(self, events: Iterable[Any]) -> None:
        """Stored events, one line each: seq, time, type and the event's fields."""
        for event in events:
            stamp = time.strftime("%H:%M:%S", time.localtime(event.ts))
            body = {k: v for k, v in event.event.items() if k != "type"}
            kind = inert(event.type)
            text = _short(body, 90)
            if not self.colour:
                print(f"{event.seq:>6}  {stamp}  {kind:<19} {text}", file=self.stream)
                continue
            self._line(
                (f"{event.seq:>6}", "bold"),
                (f"  {stamp}  ", "dim"),
                (f"{kind:<19}", _ROLE_STYLES.get(_role_of(event.type), "magenta")),
                (f" {text}", ""),
            )
            if self.stream is sys.stdout:
                self.stream.flush()

    # -- tables ----------------------------------------------------------------------

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
        """Rows of columns: tab-separated when plain (headers left out, so a
        script can cut them), a table with headers on a terminal."""
        if not self.colour:
            for row in rows:
                print("\t".join(inert(column) for column in row), file=self.stream)
            return
        from rich.table import Table
        from rich.text import Text

        table = Table(*headers, header_style="bold", box=None, pad_edge=False)
        for row in rows:
            table.add_row(*(Text(inert(column)) for column in row))
        self._console.print(table)

    # -- progress --------------------------------------------------------------------

    def progress(self, total: int, what: str) -> Callable[[int], None]:
        """A callback told how many of ``total`` are done, drawing a progress
        bar: rich's on a terminal with colour, a plain one otherwise."""
        if self.colour:
            from rich.progress import Progress

            bar = Progress(console=self._console, transient=False)
            task = bar.add_task(inert(what), total=total)
            bar.start()

            def advance(done: int) -> None:
                bar.update(task, completed=done)
                if done >= total:
                    bar.stop()

            return advance

        def draw(done: int) -> None:
            width = 30
            filled = width * done // max(total, 1)
            self.stream.write(f"\r  [{'#' * filled}{' ' * (width - filled)}] {done}/{total} {what}")
            if done >= total:
                self.stream.write("\n")
            self.stream.flush()

        return draw


def _role_of(event_type: str) -> str:
    if event_type in ("tool_result", "tool_started"):
        return "tool"
    return event_type


def _plain_content(content: Any) -> Any:
    """A message's content for one plain line: a list of text blocks only (the
    OpenAI Agents SDK's ``output_text`` replies) as its text, else as it is."""
    if (
        isinstance(content, list)
        and content
        and all(isinstance(b, dict) and b.get("type") in TEXT_BLOCK_TYPES for b in content)
    ):
        return " ".join(str(b.get("text", "")) for b in content)
    return content


def _message_lines(message: dict[str, Any]) -> list[tuple[str, str]]:
    """The lines of one folded message (either shape), with a style each."""
    lines: list[tuple[str, str]] = []
    content = message.get("content")
    if message.get("role") == "tool":  # the OpenAI shape's tool result
        call = inert(str(message.get("tool_call_id", "")))
        lines.append((f"← {call}  {_short(content, 100)}", ""))
        return lines
    blocks = content if isinstance(content, list) else [content] if content is not None else []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if isinstance(block, str):
            lines.append((_short(block, 110), ""))
        elif kind in TEXT_BLOCK_TYPES:
            lines.append((_short(block.get("text", ""), 110), ""))
        elif kind == "tool_use":
            name = inert(str(block.get("name", "?")))
            lines.append((f"→ {name}({_short(block.get('input', {}), 80)})", "magenta"))
        elif kind == "tool_result":
            call = inert(str(block.get("tool_use_id", "")))
            lines.append((f"← {call}  {_short(block.get('content'), 100)}", "yellow"))
        elif kind in ("thinking", "redacted_thinking"):
            lines.append((f"(thinking) {_short(block.get('thinking', ''), 100)}", "dim italic"))
        else:
            lines.append((_short(block, 110), ""))
    for call in message.get("tool_calls") or []:  # the OpenAI shape's tool calls
        function = call.get("function", {}) if isinstance(call, dict) else {}
        name = inert(str(function.get("name", "?")))
        lines.append((f"→ {name}({_short(function.get('arguments', ''), 80)})", "magenta"))
    return lines or [("", "")]


def progress_bar(stream: TextIO, what: str) -> Callable[[int, int], None]:
    """A ``(done, total)`` callback drawing :meth:`Screen.progress` on ``stream``,
    the bar made at the first call (when the total is known)."""
    bar: Callable[[int], None] | None = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = screen_for(stream).progress(total, what)
        bar(done)

    return progress


def screen_for(stream: TextIO) -> Screen:
    """The screen for ``stream``: coloured when :func:`colour_wanted` says so."""
    return Screen(stream, colour_wanted(stream))
