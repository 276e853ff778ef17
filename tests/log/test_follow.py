"""``follow()`` on every synchronous backend: events as they are committed,
woken at once by this process's writes, by a bounded poll for another
process's; stopping leaves nothing behind; closing and truncating end it
with typed errors. And the one loop every follower runs (``agentlog.log.follow``),
stepped by hand."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog import (
    BaseCheckpointer,
    CheckpointerClosedError,
    FileCheckpointer,
    MemoryCheckpointer,
    RawEvent,
    SessionTruncatedError,
    SqliteCheckpointer,
    StoredEvent,
)
from agentlog.log import CommitSignal
from agentlog.log.follow import (
    TOKEN,
    Deliver,
    Expected,
    Look,
    Wait,
    anchor_of,
    anchored_page,
    anchored_read,
    budget_step,
    follow_steps,
    has_new_events,
)

from ..conftest import ENGINES, postgres_conninfo, postgres_schema, require_engine
from ..waiting import wait_until

EVENT = {"type": "user", "content": "hi"}
#: Far longer than any wake-up: a test that waits this long has failed.
PATIENCE = 20.0

KINDS = ["memory", "file", *(f"sqlite-{name}" for name in ENGINES), "postgres"]


def open_log(kind: str, location: Path) -> BaseCheckpointer:
    if kind == "memory":
        return MemoryCheckpointer()
    if kind == "postgres":
        from agentlog import PostgresCheckpointer

        return PostgresCheckpointer(postgres_conninfo(), schema=postgres_schema(location))
    if kind == "file":
        return FileCheckpointer(location / "sessions")
    engine = kind.removeprefix("sqlite-")
    require_engine(engine)
    return SqliteCheckpointer(location / "agentlog.db", engine=engine)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        request.getfixturevalue("postgres_server")  # skipped or failed without one
    return str(request.param)


@pytest.fixture
def log(kind: str, tmp_path: Path) -> Iterator[BaseCheckpointer]:
    with open_log(kind, tmp_path) as cp:
        yield cp


def watchdog(log: BaseCheckpointer, seconds: float = PATIENCE) -> threading.Timer:
    """Close ``log`` after ``seconds``: a follower that would hang fails instead."""
    timer = threading.Timer(seconds, log.close)
    timer.daemon = True
    timer.start()
    return timer


def waiting(signal: CommitSignal) -> Callable[[], bool]:
    """Whether a follower waits on ``signal``."""
    return lambda: signal.waiters > 0


def later(ready: Callable[[], bool], action: Callable[[], object]) -> threading.Thread:
    """A thread that does ``action`` once ``ready()`` (e.g. once a follower
    waits), or after the test's patience, when the watchdog fails it."""

    def run() -> None:
        wait_until(ready, timeout=PATIENCE)
        action()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def take(events: Iterator[StoredEvent], count: int) -> list[StoredEvent]:
    taken: list[StoredEvent] = []
    for event in events:
        taken.append(event)
        if len(taken) == count:
            break
    return taken


def test_follow_yields_what_is_there_then_each_later_append(log: BaseCheckpointer) -> None:
    log.append("s", [EVENT, EVENT])
    # A poll far longer than the test may take: only the commit signal can
    # deliver the later events in time.
    writer = later(
        waiting(log.commits),
        lambda: [log.append("s", [dict(EVENT, content=f"m{i}")]) for i in range(3)],
    )
    begin = time.monotonic()
    timer = watchdog(log)
    follower = log.follow("s", poll_interval=PATIENCE)
    seen = [event.seq for event in take(follower, 5)]
    timer.cancel()
    writer.join()
    assert seen == [1, 2, 3, 4, 5]
    assert time.monotonic() - begin < PATIENCE / 2


def test_follow_starts_after_since_seq_and_ignores_other_sessions(
    log: BaseCheckpointer,
) -> None:
    log.append("s", [EVENT] * 3)
    follower = log.follow("s", since_seq=2)
    assert next(follower).seq == 3
    log.append("other", [EVENT] * 5)
    log.append("s", [dict(EVENT, content="four")])
    event = next(follower)
    assert (event.seq, event.event["content"]) == (4, "four")
    follower.close()


def test_follow_waits_for_a_session_that_does_not_exist_yet(log: BaseCheckpointer) -> None:
    writer = later(waiting(log.commits), lambda: log.append("new", [EVENT]))
    timer = watchdog(log)
    assert [event.seq for event in take(log.follow("new"), 1)] == [1]
    timer.cancel()
    writer.join()


def test_appends_from_several_threads_arrive_in_order_without_gaps(
    log: BaseCheckpointer,
) -> None:
    def write() -> None:
        for _ in range(25):
            log.append("s", [EVENT])

    writers = [threading.Thread(target=write) for _ in range(4)]
    for thread in writers:
        thread.start()
    timer = watchdog(log)
    seen = [event.seq for event in take(log.follow("s"), 100)]
    timer.cancel()
    for thread in writers:
        thread.join()
    assert seen == list(range(1, 101))


def test_stopping_a_follower_leaves_no_thread_behind(log: BaseCheckpointer) -> None:
    log.append("s", [EVENT])
    before = set(threading.enumerate())
    follower = log.follow("s", poll_interval=0.001)
    assert next(follower).seq == 1
    follower.close()
    for event in log.follow("s"):
        assert event.seq == 1
        break
    assert set(threading.enumerate()) <= before  # (an earlier test's thread may end)
    # The checkpointer is still usable, and a new follower sees new events.
    log.append("s", [EVENT])
    assert [event.seq for event in take(log.follow("s", 1), 1)] == [2]


def test_closing_the_checkpointer_ends_a_waiting_follower(log: BaseCheckpointer) -> None:
    log.append("s", [EVENT])
    outcome: list[BaseException] = []
    seen: list[int] = []

    def follow() -> None:
        try:
            for event in log.follow("s", poll_interval=PATIENCE):
                seen.append(event.seq)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=follow)
    thread.start()
    assert wait_until(lambda: bool(seen) and waiting(log.commits)(), timeout=PATIENCE)  # waits
    log.close()
    thread.join(PATIENCE / 2)
    assert not thread.is_alive()
    assert seen == [1]
    assert len(outcome) == 1 and isinstance(outcome[0], CheckpointerClosedError)


def test_follow_on_a_closed_checkpointer_raises(log: BaseCheckpointer) -> None:
    log.close()
    with pytest.raises(CheckpointerClosedError):
        log.follow("s")


def test_follow_checks_its_arguments(log: BaseCheckpointer) -> None:
    for interval in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="poll_interval"):
            log.follow("s", poll_interval=interval)
    for bad in (True, "0.5", None):  # True is not one second
        with pytest.raises(TypeError, match="poll_interval must be a number"):
            log.follow("s", poll_interval=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="with_metadata must be a bool"):
        log.list(with_metadata="no")  # type: ignore[call-overload]
    with pytest.raises(ValueError):
        log.follow("", 0)
    with pytest.raises(ValueError):
        log.follow("s", -1)


def test_a_truncate_below_the_follower_raises_a_typed_error(log: BaseCheckpointer) -> None:
    log.append("s", [EVENT] * 3)
    follower = log.follow("s")
    assert [next(follower).seq for _ in range(3)] == [1, 2, 3]
    log.truncate("s", 1)
    with pytest.raises(SessionTruncatedError) as caught:
        next(follower)
    assert (caught.value.session_id, caught.value.seq, caught.value.head) == ("s", 3, 1)


def test_a_truncate_noticed_while_waiting_raises(log: BaseCheckpointer) -> None:
    log.append("s", [EVENT] * 2)
    truncator = later(waiting(log.commits), lambda: log.truncate("s", 0))
    timer = watchdog(log)
    with pytest.raises(SessionTruncatedError):
        for _ in log.follow("s"):
            pass
    timer.cancel()
    truncator.join()


def test_a_delete_under_the_follower_raises_but_a_truncate_above_it_does_not(
    log: BaseCheckpointer,
) -> None:
    log.append("s", [EVENT] * 2)
    follower = log.follow("s")
    assert [next(follower).seq for _ in range(2)] == [1, 2]
    log.append("s", [EVENT] * 3)
    log.truncate("s", 3)  # above the follower: it goes on to seq 3, the new head
    assert next(follower).seq == 3
    log.delete("s")
    with pytest.raises(SessionTruncatedError):
        next(follower)


def test_a_second_checkpointer_on_the_same_sqlite_file_is_noticed_by_polling(
    tmp_path: Path, engine: str
) -> None:
    db = tmp_path / "shared.db"
    with (
        SqliteCheckpointer(db, engine=engine) as follower_log,
        SqliteCheckpointer(db, engine=engine) as writer_log,
    ):
        port = follower_log.writer_port()
        token = port.change_token("s")
        assert port.change_token("s") == token  # idle: the same
        writer = later(
            waiting(follower_log.commits), lambda: writer_log.append("s", [EVENT, EVENT])
        )
        timer = watchdog(follower_log)
        seen = [event.seq for event in take(follower_log.follow("s"), 2)]
        timer.cancel()
        writer.join()
        assert seen == [1, 2]
        assert port.change_token("s") != token


def test_the_follow_loop_without_io() -> None:
    """The one loop every follower runs, stepped by hand: what it asks for, in order."""
    count, closed = [0], [False]

    def check_open() -> None:
        if closed[0]:
            raise CheckpointerClosedError("closed")

    steps = follow_steps(3, lambda: count[0], check_open)
    assert next(steps) == Look(3)  # no anchor yet: the page starts at the cursor's event
    at_3 = StoredEvent(3, 2, 0.5, "user", EVENT)
    page = [StoredEvent(4, 3, 1.0, "user", EVENT)]
    assert steps.send(("t1", [at_3, *page])) == Deliver(page)  # the anchor is taken, not handed on
    at_4 = anchor_of(page[0])
    assert steps.send(None) == Look(4, at_4)  # the cursor is the last seq delivered
    assert steps.send(("t1", [])) == Wait(0)  # the mark taken before the look
    assert steps.send(False) is TOKEN  # the poll interval ended: look at the token
    assert steps.send("t1") == Wait(0)  # nothing changed: wait again
    count[0] = 1
    assert steps.send(False) is TOKEN
    assert steps.send("t2") == Look(4, at_4)  # another process wrote
    assert steps.send(("t2", [])) == Wait(1)
    assert steps.send(True) == Look(4, at_4)  # this process wrote
    assert steps.send(("t2", [])) == Wait(1)
    closed[0] = True
    with pytest.raises(CheckpointerClosedError):
        steps.send(True)  # the close woke it


def test_every_look_checks_the_event_at_the_cursor_against_its_anchor() -> None:
    """The event a follower handed on last, read again with the next page: the
    same one passes and is left out; another one at that seq (truncated, then
    appended again) raises; without an anchor, or where retention pruned it,
    the page is as read."""
    handed = StoredEvent(5, 4, 1.0, "user", EVENT)
    after = StoredEvent(6, 5, 1.5, "user", EVENT)
    again = StoredEvent(5, 4, 2.0, "user", EVENT)  # the same payload, appended later
    assert anchored_page("s", 5, anchor_of(handed), [handed, after], 6) == [after]
    assert anchored_page("s", 5, anchor_of(handed), [handed], 5) == []
    with pytest.raises(SessionTruncatedError) as raised:
        anchored_page("s", 5, anchor_of(handed), [again, after], 7)
    assert raised.value.rewritten and (raised.value.seq, raised.value.head) == (5, 7)
    assert "appended to again" in str(raised.value)
    assert anchored_page("s", 5, None, [handed, after], 6) == [handed, after]
    assert anchored_page("s", 5, anchor_of(handed), [after], 6) == [after]  # 5 was pruned


def raw(seq: int, size: int, ts: float = 1.0) -> RawEvent:
    return RawEvent(seq, seq - 1 or None, ts, "user", b"x" * size)


def test_a_byte_budget_sizes_each_look_by_the_largest_event_delivered() -> None:
    """With ``max_bytes`` the first look asks for one event, each later one for
    as many as the budget holds at the largest event delivered so far."""
    steps = follow_steps(0, lambda: 0, lambda: None, max_bytes=1000)
    assert next(steps) == Look(0, None, 1)
    first = [raw(1, 300)]
    assert steps.send(("t", first)) == Deliver(first)
    assert steps.send(None) == Look(1, anchor_of(first[0]), 3)  # 1000 // 300
    second = [raw(2, 100), raw(3, 600), raw(4, 100)]
    assert steps.send(("t", second)) == Deliver(second)
    assert steps.send(None) == Look(4, anchor_of(second[-1]), 1)  # 1000 // 600
    big = [raw(5, 5000)]  # larger than the budget: still one at a time
    assert steps.send(("t", big)) == Deliver(big)
    assert steps.send(None) == Look(5, anchor_of(big[0]), 1)
    unbudgeted = follow_steps(0, lambda: 0, lambda: None)
    assert next(unbudgeted) == Look(0, None, None)  # the port's own page size


def test_the_budget_arithmetic_and_the_read_it_sizes() -> None:
    assert budget_step(1000, 0) == 1  # nothing seen yet: one event
    assert budget_step(1000, 300) == 3
    assert budget_step(1000, 300, cap=2) == 2
    assert budget_step(10, 300) == budget_step(-5, 300) == 1  # always one at least
    assert anchored_read(5, 1000) == (4, 1001)  # the cursor's event, then a page
    assert anchored_read(5, 1000, 3) == (4, 4)
    assert anchored_read(0, 1000, 3) == (0, 3)
    assert anchored_read(5, 2, 50) == (4, 3)  # the port's page size caps a limit


def test_an_expected_check_stands_for_a_resumed_followers_anchor() -> None:
    """A follower resuming at a seq it saw checks the event there with its own
    ``expect`` on the first look (and on each until it delivers), not with an
    anchor taken from the session as it is now."""
    seen = raw(3, 10, ts=1.0)
    again = raw(3, 10, ts=2.0)  # the same bytes, appended again after a truncate

    def same(event: RawEvent) -> bool:
        return event.ts == seen.ts

    steps = follow_steps(3, lambda: 0, lambda: None, expect=same)
    look = next(steps)
    assert look == Look(3, Expected(same), None)
    assert look.anchor is not None
    assert steps.send(("t", [])) == Wait(0)  # nothing new: the check stays
    assert steps.send(True) == look
    after = [raw(4, 10)]
    assert anchored_page("s", 3, look.anchor, [seen, *after], 4) == after
    with pytest.raises(SessionTruncatedError) as raised:
        anchored_page("s", 3, look.anchor, [again, *after], 4)
    assert raised.value.rewritten and raised.value.seq == 3
    assert anchored_page("s", 3, look.anchor, after, 4) == after  # 3 was pruned
    assert steps.send(("t", after)) == Deliver(after)
    assert steps.send(None) == Look(4, anchor_of(after[0]), None)  # then anchors again
    # From 0 there is nothing to check.
    assert next(follow_steps(0, lambda: 0, lambda: None, expect=same)) == Look(0)


def open_async(kind: str, log: BaseCheckpointer, location: Path) -> Any:
    """The async twin of ``log``'s backend, and a record of how many events
    each of its follower's reads asked for."""
    if kind == "postgres":
        from agentlog.aio import AsyncPostgresCheckpointer

        log.close()
        found: Any = AsyncPostgresCheckpointer(
            postgres_conninfo(), schema=postgres_schema(location)
        )
        scan = found._checked_scan

        async def counted(page_of: Any, session_id: str, start: int, count: int) -> Any:
            found.asked.append(count)
            return await scan(page_of, session_id, start, count)

        found._checked_scan = counted
    else:
        from agentlog.aio import AsyncBaseCheckpointer

        found = AsyncBaseCheckpointer(log)
        page = found._port.follow_json_page

        def counted_page(
            session_id: str, after: int, anchor: Any, limit: int | None = None
        ) -> list[RawEvent]:
            found.asked.append(1000 if limit is None else limit)
            return page(session_id, after, anchor, limit)

        found._port.follow_json_page = counted_page
    found.asked = []
    return found


def test_follow_json_reads_within_its_byte_budget_and_checks_a_resumed_event(
    kind: str, tmp_path: Path
) -> None:
    """Every async twin: ``follow_json(max_bytes=)`` reads one event, then as
    many as the budget holds at the largest seen (never a page of a
    thousand); ``expect`` ends a resumed follower whose event at its seq is
    another one now (truncated, appended again) with a rewritten
    :class:`SessionTruncatedError`, and passes one whose event is the same."""
    events = [{"type": "user", "content": f"{n:03}" + "x" * 80} for n in range(9)]

    async def main(log: Any) -> None:
        await log.append("s", events)
        budget = 250  # two of these events (about 110 bytes of JSON each)
        got = []
        async for event in log.follow_json("s", max_bytes=budget, poll_interval=0.05):
            got.append(event)
            if len(got) == len(events):
                break
        assert [e.seq for e in got] == list(range(1, 10))
        # One event, then two at a time (a PostgreSQL read counts the
        # cursor's event too); a follower without a budget asks for 1000.
        assert log.asked[0] == 1 and max(log.asked) <= 3, log.asked
        at_5 = got[4]

        def same(event: RawEvent) -> bool:
            return (event.ts, event.json) == (at_5.ts, at_5.json)

        resumed = log.follow_json("s", 5, expect=same, poll_interval=0.05)
        assert (await resumed.__anext__()).seq == 6
        await resumed.aclose()
        await log.truncate("s", 4)
        await log.append("s", events[4:])  # the same payload at seq 5, appended again
        rewritten = log.follow_json("s", 5, expect=same, poll_interval=0.05)
        with pytest.raises(SessionTruncatedError) as raised:
            await rewritten.__anext__()
        assert raised.value.rewritten and raised.value.seq == 5
        with pytest.raises(ValueError, match="max_bytes"):
            log.follow_json("s", max_bytes=0)
        await log.aclose()

    with open_log(kind, tmp_path) as base:
        asyncio.run(main(open_async(kind, base, tmp_path)))


def test_every_look_checks_the_cursor_against_the_head() -> None:
    assert has_new_events("s", 2, 3)
    assert not has_new_events("s", 3, 3)
    with pytest.raises(SessionTruncatedError) as raised:
        has_new_events("s", 4, 3)
    assert (raised.value.session_id, raised.value.seq, raised.value.head) == ("s", 4, 3)


def test_the_commit_signal_wakes_waiters_and_listeners() -> None:
    signal = CommitSignal()
    calls: list[int] = []
    signal.subscribe(lambda: calls.append(signal.count))
    mark = signal.count
    assert not signal.wait(mark, 0.01)
    waker = later(waiting(signal), signal.notify)
    assert signal.wait(mark, PATIENCE)
    waker.join()
    assert calls == [mark + 1]
    assert signal.wait(mark, 0)  # already moved on
    signal.unsubscribe(calls.append)  # not subscribed: nothing happens


# -- another process ---------------------------------------------------------------

CHILD = """
import sys, time
from agentlog import FileCheckpointer, SqliteCheckpointer
kind, location, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
if kind == "file":
    log = FileCheckpointer(location)
elif kind == "postgres":
    import os
    from agentlog import PostgresCheckpointer
    log = PostgresCheckpointer(os.environ["AGENTLOG_TEST_POSTGRES"], schema=location)
else:
    log = SqliteCheckpointer(location, engine=kind.removeprefix("sqlite-"))
with log:
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(count):
        log.append("s", [{"type": "user", "content": f"child {i}"}])
        time.sleep(0.01)  # spaced out: the follower meets them one by one
"""


def start_appender(kind: str, location: Path | str) -> subprocess.Popen[str]:
    """A child process that opens ``kind``'s store at ``location``, prints
    ``ready``, and once a line comes in on its stdin appends five events."""
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, kind, str(location), "5"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def appender_store(kind: str, tmp_path: Path) -> Path | str:
    """Where :func:`start_appender`'s child writes a ``kind`` store: made
    first where the child expects one to exist (a file store, a schema)."""
    if kind == "file":
        location = tmp_path / "sessions"
        FileCheckpointer(location).close()  # the store exists; the child owns it
        return location
    if kind == "postgres":
        from agentlog import PostgresCheckpointer

        schema = postgres_schema(tmp_path)
        PostgresCheckpointer(postgres_conninfo(), schema=schema).close()
        return schema
    require_engine(kind.removeprefix("sqlite-"))
    return tmp_path / "agentlog.db"


@pytest.mark.parametrize("kind", [kind for kind in KINDS if kind != "memory"], indirect=True)
def test_follow_sees_another_process_append(kind: str, tmp_path: Path) -> None:
    location = appender_store(kind, tmp_path)
    log: BaseCheckpointer
    if kind == "file":
        log = FileCheckpointer(location, read_only=True)
    elif kind == "postgres":
        log = open_log(kind, tmp_path)
    else:
        log = SqliteCheckpointer(location, engine=kind.removeprefix("sqlite-"))
    child = start_appender(kind, location)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        with log:
            follower = log.follow("s")
            child.stdin.write("go\n")
            child.stdin.flush()
            timer = watchdog(log)
            seen = [(event.seq, event.event["content"]) for event in take(follower, 5)]
            timer.cancel()
        assert seen == [(i + 1, f"child {i}") for i in range(5)]
    finally:
        assert child.wait(PATIENCE) == 0


def test_an_endless_poll_interval_waits_for_a_wake_up(log: BaseCheckpointer) -> None:
    """``poll_interval=inf`` (or any wait longer than a lock takes) polls
    never; a write through the same object still wakes the follower."""
    log.append("s", [EVENT])
    timer = watchdog(log)
    try:
        events = log.follow("s", poll_interval=float("inf"))
        assert next(events).seq == 1
        threading.Timer(0.2, log.append, args=("s", [EVENT])).start()
        assert next(events).seq == 2
        events.close()
    finally:
        timer.cancel()


def test_a_follower_starting_past_the_head_is_told_so(log: BaseCheckpointer) -> None:
    log.append("s", [EVENT])
    with pytest.raises(SessionTruncatedError, match=r"ends at seq 1, before the follower's seq 5"):
        next(log.follow("s", since_seq=5))
