"""The follow loop, written once: a state machine without I/O, and its two drivers.

Every ``follow()`` — on a thread or an event loop, on any backend — is one
loop: look (take the commit mark, then the change token, then the page
after the cursor); hand a page on and look again; or wait until a commit
or the poll interval, then look again if a commit came or the token moved;
a closed checkpointer ends it; a session behind the cursor (truncated,
deleted), or one whose event at the cursor is no longer the event handed on
(truncated, then appended to past the cursor again), ends it with
:class:`SessionTruncatedError`.

:func:`follow_steps` is that loop as a generator of steps, doing no I/O: a
driver performs each step and sends back its result (as psycopg 3 writes
its protocol once for its sync and async connections). :func:`follow_pages`
drives it on a :class:`FollowPort` of blocking calls (``BaseCheckpointer.follow``),
:func:`follow_pages_async` on an :class:`AsyncFollowPort` of coroutines
(``AsyncBaseCheckpointer.follow``). A backend's port says how it looks and
waits; :func:`has_new_events` is the check of the cursor against the head
that every look makes, and :func:`anchored_page` the check that the event at
the cursor is still the one handed on (its *anchor*: seq, time and payload,
which an event appended again at that seq after a truncate never shares; or,
for a reader resuming from a seq it saw before, its own :class:`Expected`
check of that event); :func:`budget_step` sizes a follower's pages (and any
budgeted read) by the largest event seen, for a follower given a byte budget;
:func:`woken_or_timed_out` is how both async checkpointers' followers wait:
until a commit calls :func:`wake`, or the poll interval ends.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Hashable
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, NoReturn, TypeVar

from ..errors import SessionTruncatedError
from ..events import RawEvent, StoredEvent

__all__ = [
    "TOKEN",
    "Anchor",
    "AsyncFollowPort",
    "Deliver",
    "Expected",
    "FollowPort",
    "FollowStep",
    "Look",
    "Token",
    "Wait",
    "anchor_of",
    "anchored_page",
    "anchored_read",
    "budget_step",
    "follow_pages",
    "follow_pages_async",
    "follow_steps",
    "has_new_events",
    "wake",
    "woken_or_timed_out",
]

#: What a follower's pages hold: events, or events with their JSON undecoded.
_E = TypeVar("_E", StoredEvent, RawEvent)

#: What a look sends back: the change token, and the page after the cursor
#: (empty: nothing new).
Looked = tuple[Hashable, builtins.list[_E]]


#: What identifies the event a follower handed on last: its seq, the time it
#: was appended and its payload (decoded or as stored). An event appended at
#: the same seq after a truncate is a new row with its own time.
Anchor = tuple[int, float, object]


def anchor_of(event: StoredEvent | RawEvent) -> Anchor:
    """The :data:`Anchor` of a stored event."""
    return event[0], event[2], event[4]


class Expected(NamedTuple):
    """A resuming reader's own check of the event at its cursor, in place of
    an :data:`Anchor`: ``check(event)`` is False when the event there is not
    the one the reader saw (the session was truncated and appended to again
    while it was away). It is called on whatever thread the look runs on."""

    check: Callable[[Any], bool]


def budget_step(budget: int, largest: int, cap: int | None = None) -> int:
    """How many events the next budgeted read takes: one while no event's
    size is known (``largest`` 0), then as many as ``budget`` bytes hold at
    the ``largest`` size seen so far, at least one and at most ``cap``. A
    reader that sizes each read so holds about its budget however large the
    events are, and reads small events in pages as large as ``cap``."""
    if largest <= 0:
        return 1
    step = max(1, budget // largest)
    return step if cap is None else max(1, min(cap, step))


def anchored_read(after_seq: int, page_size: int, limit: int | None = None) -> tuple[int, int]:
    """Where a look at ``after_seq`` reads from, and how many events: from the
    event at the cursor, for :func:`anchored_page` to check, then a page (of
    ``page_size`` events, or ``limit`` when that is smaller: a follower's
    byte budget, see :class:`Look`)."""
    if limit is not None:
        page_size = max(1, min(page_size, limit))
    start = max(after_seq - 1, 0)
    return start, page_size + after_seq - start


def anchored_page(
    session_id: str,
    after_seq: int,
    anchor: Anchor | Expected | None,
    page: builtins.list[_E],
    head: int,
) -> builtins.list[_E]:
    """A follower's page read from ``after_seq - 1``, so that it starts with the
    event at ``after_seq``: without that event once it is checked against
    ``anchor`` (the same :data:`Anchor`, or passing an :class:`Expected`
    check), or :class:`SessionTruncatedError` when it is another event
    (the session was truncated below ``after_seq`` and appended to again).

    Without an anchor (a follower's first look, from a caller's
    ``since_seq``) the page is returned whole, for the follower to take its
    anchor from the first event (see :func:`follow_steps`); so is a page that
    does not start at ``after_seq`` (retention pruned that event: it was not
    appended again).
    """
    if anchor is None or not page or page[0].seq != after_seq:
        return page
    same = anchor.check(page[0]) if isinstance(anchor, Expected) else anchor_of(page[0]) == anchor
    if not same:
        raise SessionTruncatedError(session_id, after_seq, head, rewritten=True)
    return page[1:]


def has_new_events(session_id: str, after_seq: int, head: int) -> bool:
    """Whether a follower at ``after_seq`` has events to read, the session's head
    being ``head``; :class:`SessionTruncatedError` when the head is below it
    (the session was truncated or deleted under the follower)."""
    if head < after_seq:
        raise SessionTruncatedError(session_id, after_seq, head)
    return head > after_seq


class Look(NamedTuple):
    """Step: read the change token, then the page of events after ``after_seq``
    (checked with :func:`has_new_events`, and with :func:`anchored_page`
    against ``anchor``, the event at ``after_seq`` as handed on); send back
    ``(token, page)``. ``limit``, when set, caps the page's events (the port's
    own page size caps it too): a follower with a byte budget asks for one
    event first, then for as many as its budget holds (:func:`budget_step`)."""

    after_seq: int
    anchor: Anchor | Expected | None = None
    limit: int | None = None

    def call(self, port: FollowPort[Any] | AsyncFollowPort[Any]) -> Any:
        """The port's call that performs the step (awaitable on an async port)."""
        return port.look(self.after_seq, self.anchor, self.limit)


class Wait(NamedTuple):
    """Step: wait until a commit moves the commit count past ``mark`` or the poll
    interval passes; send back whether the count moved."""

    mark: int

    def call(self, port: FollowPort[Any] | AsyncFollowPort[Any]) -> Any:
        """The port's call that performs the step (awaitable on an async port)."""
        return port.wait(self.mark)


class Token:
    """Step: read the change token again; send it back."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "TOKEN"

    def call(self, port: FollowPort[Any] | AsyncFollowPort[Any]) -> Any:
        """The port's call that performs the step (awaitable on an async port)."""
        return port.token()


#: The one :class:`Token` step.
TOKEN = Token()


class Deliver(NamedTuple):
    """Step: hand ``events`` (a page, in seq order) to the consumer; send back None."""

    events: builtins.list[Any]


#: What :func:`follow_steps` asks of its driver: a call on its port, or a page to hand on.
FollowStep = Look | Wait | Token | Deliver


def follow_steps(
    since_seq: int,
    mark: Callable[[], int],
    check_open: Callable[[], None],
    *,
    max_bytes: int | None = None,
    expect: Callable[[Any], bool] | None = None,
) -> Generator[FollowStep, Any, NoReturn]:
    """The follow loop from ``since_seq``, as the steps a driver performs.

    ``mark()`` is the commit count of this process's writes, read without
    waiting; ``check_open()`` raises once the checkpointer is closed. The
    cursor is the seq of the last event delivered, and each look checks that
    the event there is still the one delivered (:func:`anchored_page`). The
    mark is taken before the look and a wait ends as soon as it moves, so a
    commit between the look and the wait is never missed; another process's commit is seen by
    the change token, compared after each wait the poll interval ended.

    ``expect`` checks the event at ``since_seq`` on the first look (and on
    each until an event is delivered), for a reader resuming from a seq it
    saw: it fails when that event is another one (:class:`Expected`).
    ``max_bytes`` (for pages of :class:`~agentlog.events.RawEvent`, sized by
    their stored JSON) caps each page's events by :func:`budget_step` at the
    largest event delivered so far: a page holds about ``max_bytes`` (one
    event at least), the first look one event.
    """
    last = since_seq
    anchor: Anchor | Expected | None = None
    if expect is not None and since_seq:
        anchor = Expected(expect)
    largest = 0
    while True:
        check_open()
        seen = mark()
        limit = None if max_bytes is None else budget_step(max_bytes, largest)
        token, page = yield Look(last, anchor, limit)
        if anchor is None and last and page and page[0].seq == last:
            # The first look from a caller's since_seq: the event there, as
            # it is now, is what later looks check the session against.
            anchor = anchor_of(page[0])
            page = page[1:]
        if page:
            last = page[-1].seq
            anchor = anchor_of(page[-1])
            if max_bytes is not None:
                largest = max(largest, *(len(event.json) for event in page))
            yield Deliver(page)
            # The next look holds no page already handed on: the reader keeps
            # one page, and the collector walks no event the caller dropped.
            del page
            continue
        while True:
            moved = yield Wait(seen)
            check_open()  # closing wakes the waiters: it ends them here
            if moved or (yield TOKEN) != token:
                break


def wake(future: asyncio.Future[None]) -> None:
    """Wake an async follower waiting on ``future`` (a second wake does nothing)."""
    if not future.done():
        future.set_result(None)


async def woken_or_timed_out(future: asyncio.Future[None], timeout: float) -> None:
    """Until :func:`wake` wakes ``future`` or ``timeout`` seconds pass: an async
    follower's wait for a commit, with its poll interval."""
    timer = asyncio.get_running_loop().call_later(timeout, wake, future)
    try:
        await future
    finally:
        timer.cancel()


@dataclass(frozen=True, slots=True)
class FollowPort(Generic[_E]):
    """How a follower looks and waits, with blocking calls (see :func:`follow_pages`)."""

    #: Raise once the checkpointer is closed.
    check_open: Callable[[], None]
    #: The commit count of this process's writes.
    mark: Callable[[], int]
    #: ``look(after_seq, anchor, limit)``: ``(change token, page after after_seq)``
    #: (see :class:`Look`).
    look: Callable[[int, Anchor | Expected | None, int | None], Looked[_E]]
    #: The change token now.
    token: Callable[[], Hashable]
    #: ``wait(mark)``: block until the count moves past ``mark`` (True) or the poll interval ends.
    wait: Callable[[int], bool]


@dataclass(frozen=True, slots=True)
class AsyncFollowPort(Generic[_E]):
    """How a follower looks and waits, awaited (see :func:`follow_pages_async`)."""

    #: Raise once the checkpointer is closed.
    check_open: Callable[[], None]
    #: The commit count of this process's writes.
    mark: Callable[[], int]
    #: ``await look(after_seq, anchor, limit)``: ``(change token, page after after_seq)``
    #: (see :class:`Look`).
    look: Callable[[int, Anchor | Expected | None, int | None], Awaitable[Looked[_E]]]
    #: ``await token()``: the change token now.
    token: Callable[[], Awaitable[Hashable]]
    #: ``await wait(mark)``: until the count moves past ``mark`` (True) or the poll interval ends.
    wait: Callable[[int], Awaitable[bool]]


def follow_pages(port: FollowPort[_E], since_seq: int) -> Generator[builtins.list[_E], None]:
    """The pages of events after ``since_seq`` as they are committed, forever:
    :func:`follow_steps` driven with ``port``'s blocking calls."""
    steps = follow_steps(since_seq, port.mark, port.check_open)
    step = next(steps)
    while True:
        if isinstance(step, Deliver):
            yield step.events
            step = steps.send(None)
        else:
            step = steps.send(step.call(port))


async def follow_pages_async(
    port: AsyncFollowPort[_E],
    since_seq: int,
    *,
    max_bytes: int | None = None,
    expect: Callable[[Any], bool] | None = None,
) -> AsyncGenerator[builtins.list[_E], None]:
    """:func:`follow_pages`, awaited: other tasks run between two pages
    (``max_bytes`` and ``expect``: see :func:`follow_steps`)."""
    steps = follow_steps(since_seq, port.mark, port.check_open, max_bytes=max_bytes, expect=expect)
    step = next(steps)
    while True:
        if isinstance(step, Deliver):
            yield step.events
            await asyncio.sleep(0)
            step = steps.send(None)
        else:
            step = steps.send(await step.call(port))
