"""AgentlogSession: the OpenAI Agents SDK's Session protocol on agentlog's logs.

The SDK is an extra (``pip install "agentlog[openai-agents]"``): without it
these tests are skipped, saying so — or fail, under
``AGENTLOG_REQUIRE_EXTENSIONS=1`` (CI installs the extras).
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ..conftest import PYTHON, child_env, extensions_required, require_engine

try:
    import agents  # noqa: F401 (only: is the SDK installed?)
except ImportError as exc:  # pragma: no cover - depends on the environment
    if extensions_required():
        pytest.fail(
            f"the OpenAI Agents SDK is not installed ({exc}); AGENTLOG_REQUIRE_EXTENSIONS is set",
            pytrace=False,
        )
    pytest.skip(
        f"the OpenAI Agents SDK is not installed ({exc}): pip install -e '.[openai-agents]'",
        allow_module_level=True,
    )

from agents import SessionSettings, SQLiteSession
from agents.memory import Session

from agentlog import (
    AgentlogError,
    CheckpointerClosedError,
    InvalidEventError,
    InvalidSessionIdError,
    StoredEvent,
    UnserializableEventError,
    fold_events,
)
from agentlog.aio import (
    AsyncCheckpointer,
    AsyncMemoryCheckpointer,
    AsyncSqliteCheckpointer,
)
from agentlog.integrations.openai_agents import (
    ITEM_FIELD,
    AgentlogSession,
)

from . import openai_agents_child as child
from .openers import async_log_opener

CHILD = str(Path(child.__file__).resolve())
T = TypeVar("T")

#: Items of every shape the SDK stores, plus ones it may add later.
ITEMS: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "what is the weather in Zürich? 天気 🌦"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and Bern"}]},
    {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "two"}]},
    {
        "arguments": '{"city": "Zürich"}',
        "call_id": "call_1",
        "name": "weather",
        "type": "function_call",
        "id": "fc_1",
        "status": "completed",
    },
    {"call_id": "call_1", "output": "sunny, 21°C", "type": "function_call_output"},
    {
        "call_id": "call_2",
        "output": [{"type": "input_text", "text": "rain"}],
        "type": "function_call_output",
    },
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "sunny", "annotations": []}],
    },
    {"type": "custom_tool_call", "call_id": "c_3", "name": "patch", "input": "diff"},
    {"type": "custom_tool_call_output", "call_id": "c_3", "output": "ok"},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "q"}},
    {"type": "item_reference", "id": "msg_0"},
    {"type": "a_future_item", "payload": {"nested": [1, 2.5, None, True, "x"]}, "n": -(2**63)},
    {"role": "developer", "content": ""},
]


# -- the stores -----------------------------------------------------------------------

STORES = ("sqlite-c", "sqlite-python", "file", "memory")


@pytest.fixture(params=STORES)
def open_log(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], AsyncCheckpointer]:
    """Opens the async checkpointer under test (the same storage each call)."""
    return async_log_opener(request, tmp_path, "sessions")


def run(main: Callable[[], Awaitable[T]]) -> T:
    async def wrapped() -> T:
        return await main()

    return asyncio.run(wrapped())


def run_on_log(
    open_log: Callable[[], AsyncCheckpointer],
    main: Callable[[AsyncCheckpointer], Awaitable[None]],
) -> None:
    """Run ``main`` on a log just opened, in an event loop of its own; close the log after."""

    async def on_log() -> None:
        log = open_log()
        try:
            await main(log)
        finally:
            await log.aclose()

    asyncio.run(on_log())


async def events_of(log: AsyncCheckpointer, session_id: str) -> list[StoredEvent]:
    return [event async for event in log.read(session_id)]


# -- the protocol ---------------------------------------------------------------------


def test_it_is_an_sdk_session(open_log: Callable[[], AsyncCheckpointer]) -> None:
    async def main(log: AsyncCheckpointer) -> None:
        session = AgentlogSession("s", log)
        assert isinstance(session, Session)
        assert session.session_id == "s"
        assert session.session_settings == SessionSettings()
        assert await session.get_items() == []

    run_on_log(open_log, main)


def test_items_come_back_equal_in_order(open_log: Callable[[], AsyncCheckpointer]) -> None:
    async def main(log: AsyncCheckpointer) -> None:
        session = AgentlogSession("s", log)
        await session.add_items(copy.deepcopy(ITEMS[:5]))
        await session.add_items([])
        await session.add_items(copy.deepcopy(ITEMS[5:]))
        got = await session.get_items()
        assert got == ITEMS
        # Byte for byte: the same JSON, key order included.
        assert json.dumps(got) == json.dumps(ITEMS)
        assert await log.head("s") == len(ITEMS)  # one event per item

    run_on_log(open_log, main)


def test_events_map_onto_agentlog_types_and_fold(open_log: Callable[[], AsyncCheckpointer]) -> None:
    async def main(log: AsyncCheckpointer) -> None:
        await AgentlogSession("s", log).add_items(copy.deepcopy(ITEMS))
        stored = await events_of(log, "s")
        assert [e.type for e in stored] == [
            "context_view",
            "user",
            "user",
            "context_view",
            "assistant",
            "tool_result",
            "tool_result",
            "assistant",
            "assistant",
            "tool_result",
            "context_view",
            "context_view",
            "context_view",
            "context_view",
        ]
        assert [e.event[ITEM_FIELD] for e in stored] == ITEMS
        assert fold_events(stored) == [
            {"role": "user", "content": ITEMS[1]["content"]},
            {"role": "user", "content": ITEMS[2]["content"]},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "call_1",
                        "name": "weather",
                        "input": {"city": "Zürich"},  # the arguments, decoded
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny, 21°C"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_2",
                        "content": [{"type": "input_text", "text": "rain"}],
                    },
                ],
            },
            {"role": "assistant", "content": ITEMS[7]["content"]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c_3", "name": "patch", "input": "diff"}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "c_3", "content": "ok"}],
            },
        ]

    run_on_log(open_log, main)


def test_limit_follows_the_sdk(open_log: Callable[[], AsyncCheckpointer]) -> None:
    items = [{"role": "user", "content": f"m{n}"} for n in range(7)]

    async def main(log: AsyncCheckpointer) -> None:
        session = AgentlogSession("s", log)
        await session.add_items(items)
        assert await session.get_items() == items
        assert await session.get_items(None) == items
        assert await session.get_items(3) == items[-3:]
        assert await session.get_items(1) == items[-1:]
        assert await session.get_items(7) == items
        assert await session.get_items(100) == items
        assert await session.get_items(0) == []
        assert await session.get_items(-1) == items  # as SQLiteSession: negative is no limit
        assert await AgentlogSession("empty", log).get_items(3) == []
        # The settings' limit is the default; an explicit limit wins.
        limited = AgentlogSession("s", log, session_settings=SessionSettings(limit=2))
        assert await limited.get_items() == items[-2:]
        assert await limited.get_items(4) == items[-4:]
        assert (
            await AgentlogSession("s", log, session_settings={"limit": 5}).get_items() == items[-5:]
        )

    run_on_log(open_log, main)


def test_limit_matches_sqlite_session(tmp_path: Path) -> None:
    items = [{"role": "user", "content": f"m{n}"} for n in range(5)]

    async def main() -> None:
        ours = AgentlogSession("s", tmp_path / "ours.db")
        theirs = SQLiteSession("s", str(tmp_path / "theirs.db"))
        await ours.add_items(items)
        await theirs.add_items(items)
        for limit in (None, -3, -1, 0, 1, 2, 5, 9):
            assert await ours.get_items(limit) == await theirs.get_items(limit), limit
        for _ in range(6):
            assert await ours.pop_item() == await theirs.pop_item()
        await ours.aclose()
        theirs.close()

    run(main)


class RecordingLog(AsyncMemoryCheckpointer):
    """An AsyncCheckpointer that records every read (a memory one underneath)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[int, int | None]] = []

    def read(
        self, session_id: str, since_seq: int = 0, limit: int | None = None
    ) -> AsyncIterator[StoredEvent]:
        self.reads.append((since_seq, limit))
        return super().read(session_id, since_seq, limit)


def test_a_limit_reads_only_the_tail() -> None:
    async def main() -> None:
        log = RecordingLog()
        assert isinstance(log, AsyncCheckpointer)
        session = AgentlogSession("s", log)
        await session.add_items([{"role": "user", "content": str(n)} for n in range(1000)])
        log.reads.clear()
        assert [i["content"] for i in await session.get_items(3)] == ["997", "998", "999"]
        assert log.reads == [(997, 3)]
        log.reads.clear()
        assert (await session.pop_item() or {}).get("content") == "999"
        assert log.reads == [(999, 1)]
        # Events that hold no item are skipped; the window widens to find enough.
        await log.append("s", [{"type": "tool_started", "tool_use_id": "x"}] * 4)
        log.reads.clear()
        assert [i["content"] for i in await session.get_items(2)] == ["997", "998"]
        assert log.reads == [(1001, 2), (999, 4), (995, 8)]

    run(main)


def test_pop_item(open_log: Callable[[], AsyncCheckpointer]) -> None:
    async def main(log: AsyncCheckpointer) -> None:
        session = AgentlogSession("s", log)
        assert await session.pop_item() is None
        await session.add_items(copy.deepcopy(ITEMS[:4]))
        assert await session.pop_item() == ITEMS[3]
        assert await session.get_items() == ITEMS[:3]
        await session.add_items([ITEMS[5]])
        assert await session.get_items() == [*ITEMS[:3], ITEMS[5]]
        for expected in [ITEMS[5], *reversed(ITEMS[:3])]:
            assert await session.pop_item() == expected
        assert await session.pop_item() is None
        assert await session.get_items() == []

    run_on_log(open_log, main)


def test_pop_drops_events_that_hold_no_item(open_log: Callable[[], AsyncCheckpointer]) -> None:
    async def main(log: AsyncCheckpointer) -> None:
        session = AgentlogSession("s", log)
        await session.add_items([ITEMS[1]])
        await log.append("s", [{"type": "tool_started", "tool_use_id": "x"}])
        await log.append("s", [{"type": "assistant", "content": "written by agentlog"}])
        assert await session.get_items() == [
            ITEMS[1],
            {"role": "assistant", "content": "written by agentlog"},
        ]
        assert await session.pop_item() == {"role": "assistant", "content": "written by agentlog"}
        assert await session.pop_item() == ITEMS[1]
        assert await log.head("s") == 0

    run_on_log(open_log, main)


def test_clear_session_leaves_the_others(open_log: Callable[[], AsyncCheckpointer]) -> None:
    async def main(log: AsyncCheckpointer) -> None:
        sessions = [AgentlogSession(f"chat-{n}", log) for n in range(20)]
        for n, session in enumerate(sessions):
            await session.add_items(
                [{"role": "user", "content": f"{n}-{i}"} for i in range(n % 4 + 1)]
            )
        await sessions[7].clear_session()
        assert await sessions[7].get_items() == []
        assert "chat-7" not in {info.id for info in await log.list()}
        for n, session in enumerate(sessions):
            if n != 7:
                assert [i["content"] for i in await session.get_items()] == [
                    f"{n}-{i}" for i in range(n % 4 + 1)
                ]
        await sessions[7].clear_session()  # idempotent
        await sessions[7].add_items([ITEMS[1]])  # and usable again
        assert await sessions[7].get_items() == [ITEMS[1]]

    run_on_log(open_log, main)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"role": "user", "content": {1, 2}}, UnserializableEventError),
        ({"role": "user", "content": b"bytes"}, UnserializableEventError),
        ({"type": "function_call_output", "call_id": "c", "output": math.nan}, InvalidEventError),
        ({"type": "x", 1: "non-string key"}, UnserializableEventError),
        ("not a mapping", UnserializableEventError),
        ({"type": "x", "n": 2**64}, UnserializableEventError),
    ],
)
def test_a_failed_add_writes_nothing(
    open_log: Callable[[], AsyncCheckpointer], bad: Any, error: type[AgentlogError]
) -> None:
    async def main(log: AsyncCheckpointer) -> None:
        session = AgentlogSession("s", log)
        await session.add_items([ITEMS[1]])
        with pytest.raises(error) as raised:
            await session.add_items([ITEMS[2], ITEMS[3], bad, ITEMS[4]])
        assert isinstance(raised.value, AgentlogError)
        assert raised.value.index == 2  # type: ignore[attr-defined]
        assert await session.get_items() == [ITEMS[1]]
        assert await log.head("s") == 1
        await session.add_items([ITEMS[2]])  # the session goes on
        assert await session.get_items() == [ITEMS[1], ITEMS[2]]

    run_on_log(open_log, main)


def test_items_are_copies(open_log: Callable[[], AsyncCheckpointer]) -> None:
    async def main(log: AsyncCheckpointer) -> None:
        session = AgentlogSession("s", log)
        mine = copy.deepcopy(ITEMS[:8])
        await session.add_items(mine)
        mine[2]["content"][0]["text"] = "changed"
        mine[4]["arguments"] = "changed"
        mine.append({"role": "user", "content": "extra"})
        got = await session.get_items()
        assert got == ITEMS[:8]
        got[2]["content"].append({"type": "input_text", "text": "more"})
        got[1]["content"] = "changed"
        assert await session.get_items() == ITEMS[:8]
        assert await session.get_items(2) == ITEMS[6:8]
        popped = await session.pop_item()
        assert popped == ITEMS[7]
        assert popped is not None
        popped["content"] = "changed"
        assert await session.get_items() == ITEMS[:7]

    run_on_log(open_log, main)


def test_unicode_and_large_items(open_log: Callable[[], AsyncCheckpointer]) -> None:
    text = "".join(chr(c) for c in range(0x20, 0x3000) if chr(c).isprintable()) + "🦜\u200d🔥"
    big = {"role": "assistant", "content": [{"type": "output_text", "text": "x" * 4_000_000}]}
    many = [
        {"call_id": f"c{n}", "output": text[n:], "type": "function_call_output"} for n in range(200)
    ]

    async def main(log: AsyncCheckpointer) -> None:
        session = AgentlogSession("s ünïcödé 🦜", log)
        await session.add_items([{"role": "user", "content": text}, big, *many])
        got = await session.get_items()
        assert got == [{"role": "user", "content": text}, big, *many]
        assert await session.get_items(1) == many[-1:]

    run_on_log(open_log, main)


def test_session_ids_are_checked(tmp_path: Path) -> None:
    log = AsyncMemoryCheckpointer()
    for bad in ("", "a/b", "..", "nul\x00", "x" * 256):
        with pytest.raises(InvalidSessionIdError):
            AgentlogSession(bad, log)
    with pytest.raises(TypeError):
        AgentlogSession("s", object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        AgentlogSession("s", log, engine="c")


def test_ownership(tmp_path: Path, engine: str) -> None:
    async def main() -> None:
        async with AgentlogSession("s", tmp_path / "owned.db", engine=engine) as owner:
            assert owner.owns_checkpointer
            await owner.add_items([ITEMS[1]])
            log = owner.checkpointer
        assert isinstance(log, AsyncSqliteCheckpointer) and log.closed

        shared = AsyncSqliteCheckpointer(tmp_path / "owned.db", engine=engine)
        async with AgentlogSession("s", shared) as user:
            assert not user.owns_checkpointer
            assert await user.get_items() == [ITEMS[1]]
        assert not shared.closed  # not ours to close
        assert await AgentlogSession("s", shared).get_items() == [ITEMS[1]]
        await shared.aclose()
        for call in (user.get_items(), user.add_items([]), user.pop_item(), user.clear_session()):
            with pytest.raises(CheckpointerClosedError):
                await call

        sync_closed = AgentlogSession("s", tmp_path / "owned.db", engine=engine)
        sync_closed.close()
        assert isinstance(sync_closed.checkpointer, AsyncSqliteCheckpointer)
        assert sync_closed.checkpointer.closed

    run(main)


@pytest.fixture(params=["sqlite-c", "sqlite-python", "file"])
def durable(request: pytest.FixtureRequest) -> tuple[str, str]:
    """A durable store as ``(kind, engine)``: SQLite on each engine, and files."""
    kind, _, engine = str(request.param).partition("-")
    if kind == "sqlite":
        require_engine(engine)
    return kind, engine or "-"


def test_reopen_in_a_new_process(tmp_path: Path, durable: tuple[str, str]) -> None:
    kind, engine = durable
    location = str(tmp_path / ("s.db" if kind == "sqlite" else "files"))

    async def main() -> None:
        log = child.open_log(kind, location, engine)
        await AgentlogSession("s", log).add_items(copy.deepcopy(ITEMS))
        await log.aclose()

    run(main)
    out = subprocess.run(
        [PYTHON, CHILD, "items", kind, location, engine, "s"],
        capture_output=True,
        text=True,
        env=child_env(),
        check=True,
    )
    assert json.loads(out.stdout) == ITEMS


# -- the SDK's Runner -----------------------------------------------------------------


def _child(*args: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [PYTHON, CHILD, *args], capture_output=True, text=True, env=child_env(), timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    items: list[dict[str, Any]] = json.loads(out.stdout)
    return items


def test_runner_conversation_resumes_in_a_new_process(
    tmp_path: Path, durable: tuple[str, str]
) -> None:
    kind, engine = durable
    location = str(tmp_path / ("ours.db" if kind == "sqlite" else "ours"))

    # Turns 1-2 here, with the Runner persisting through the adapter.
    async def first() -> list[str]:
        log = child.open_log(kind, location, engine)
        finals = await child.converse(AgentlogSession("chat", log), ["paris", "rome"])
        await log.aclose()
        return finals

    assert run(first) == [
        "turn 1: sunny in paris 0, 21°C; sunny in paris 1, 21°C",
        "turn 2: sunny in rome 0, 21°C; sunny in rome 1, 21°C",
    ]
    # Turn 3 in a new process, resumed from the log.
    ours = _child("run", kind, location, engine, "chat", "oslo")
    # The SDK's own SQLiteSession, same model, same inputs, in one go.
    theirs = _child("sdk", str(tmp_path / "theirs.db"), "chat", "paris", "rome", "oslo")
    assert ours == theirs
    assert json.dumps(ours) == json.dumps(theirs)
    # 3 turns x (user, reasoning, 2 calls, 2 outputs, answer)
    assert len(ours) == 21
    assert ours[-1]["content"][0]["text"] == "turn 3: sunny in oslo 0, 21°C; sunny in oslo 1, 21°C"

    async def folded() -> list[dict[str, Any]]:
        log = child.open_log(kind, location, engine)
        events = await events_of(log, "chat")
        await log.aclose()
        return fold_events(events)

    messages = run(folded)
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "assistant",
        "user",
        "assistant",
    ] * 3
    assert messages[0] == {"role": "user", "content": "paris"}
    assert messages[3]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1_0", "content": "sunny in paris 0, 21°C"},
        {"type": "tool_result", "tool_use_id": "call_1_1", "content": "sunny in paris 1, 21°C"},
    ]
    assert messages[-1]["content"][0]["text"].startswith("turn 3:")


def test_runner_on_memory_and_cli_show(tmp_path: Path) -> None:
    async def main() -> None:
        log = AsyncMemoryCheckpointer()
        session = AgentlogSession("chat", log)
        assert await child.converse(session, ["lima"]) == [
            "turn 1: sunny in lima 0, 21°C; sunny in lima 1, 21°C"
        ]
        theirs = SQLiteSession("chat")
        await child.converse(theirs, ["lima"])
        assert await session.get_items() == await theirs.get_items()
        theirs.close()

    run(main)
    db = tmp_path / "cli.db"
    _child("run", "sqlite", str(db), "python", "chat", "lima")
    show = subprocess.run(
        [PYTHON, "-m", "agentlog", "show", str(db), "chat"],
        capture_output=True,
        text=True,
        env=child_env(),
        check=True,
    )
    lines = show.stdout.splitlines()
    assert lines[0].split() == ["user:", "lima"]
    assert "tool_use" in lines[1] and "tool_result" in lines[3]
    assert "turn 1: sunny in lima" in lines[4]
