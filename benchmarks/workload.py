"""The benchmark workload: ~500-byte mixed agent events from a fixed seed."""

from __future__ import annotations

import random
from typing import Any

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
