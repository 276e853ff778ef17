"""The benchmark workload: ~500-byte mixed agent events from a fixed seed."""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any, TypeVar

_T = TypeVar("_T")

KINDS = ("user", "assistant", "tool_started", "tool_result")
# The words the generated texts are made of.
WORDS = tuple("the agent reads a file then calls a tool and writes the answer back to user".split())  # noqa: SIM905


def events(count: int, seed: int = 20261129) -> list[dict[str, Any]]:
    """``count`` events, the same for the same seed and count."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        kind = KINDS[i % 4]
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(45, 75)))
        event: dict[str, Any] = {"type": kind, "id": f"evt_{i:09d}"}
        if kind in ("user", "assistant"):
            event["content"] = [{"type": "text", "text": text}]
            event["usage"] = {
                "input_tokens": rng.randint(10, 4000),
                "output_tokens": rng.randint(1, 900),
            }
        else:
            event["tool_use_id"] = f"toolu_{i // 4:08d}"
            event["name"] = rng.choice(["read_file", "grep", "bash", "write_file"])
            event["content"] = text
            event["is_error"] = rng.random() < 0.05
        out.append(event)
    return out


def rotated(items: Sequence[_T], round_: int) -> list[_T]:
    """``items`` starting at ``round_``'s place: each round of a side-by-side
    measurement takes them in a new order, so none is always first."""
    at = round_ % len(items)
    return [*items[at:], *items[:at]]


def median_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """The median of each round's ratio of two figures measured side by side in
    that round, so the machine's drift between rounds cancels."""
    return statistics.median(a / b for a, b in zip(numerators, denominators, strict=True))


def time_threads_appending(log: Any, events: list[Any], threads: int) -> float:
    """S5's timed part: ``threads`` threads, one session ``t{n}`` each, append
    their share of ``events`` to ``log`` one per call with the expected head;
    the seconds from their common start until the last has finished."""
    share = len(events) // threads
    barrier = threading.Barrier(threads + 1)

    def writer(slot: int) -> None:
        head = 0
        mine = events[slot * share : (slot + 1) * share]
        barrier.wait()
        for event in mine:
            head = log.append(f"t{slot}", [event], expected_head=head)

    workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    return time.perf_counter() - start


def time_langgraph_steps(saver: Any, events: list[Any], batch: int) -> float:
    """LangGraph's model on ``saver`` (set up first, untimed): one checkpoint per
    step of ``batch`` events, each holding the whole message list so far; the
    seconds the steps took."""
    from langgraph.checkpoint.base import empty_checkpoint

    saver.setup()
    config: dict[str, Any] = {"configurable": {"thread_id": "s0", "checkpoint_ns": ""}}
    messages: list[Any] = []
    start = time.perf_counter()
    for step, i in enumerate(range(0, len(events), batch)):
        messages = messages + events[i : i + batch]
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": messages}
        checkpoint["channel_versions"] = {"messages": step + 1}
        config = saver.put(
            config, checkpoint, {"source": "loop", "step": step}, {"messages": step + 1}
        )
    return time.perf_counter() - start
