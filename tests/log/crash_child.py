"""Appends batches to a store forever, acknowledging each returned append on stdout.

Run by tests/log/test_crash.py, which kills it with SIGKILL at a random moment.
"""

from __future__ import annotations

import os
import random
import sys

from agentlog import Checkpointer, FileCheckpointer, SqliteCheckpointer


def open_store(backend: str, location: str) -> Checkpointer:
    """``file``, ``postgres`` (``location`` is the schema), or ``sqlite-<synchronous>-<engine>``."""
    if backend == "file":
        return FileCheckpointer(location)
    if backend == "postgres":
        from agentlog import PostgresCheckpointer

        return PostgresCheckpointer(os.environ["AGENTLOG_TEST_POSTGRES"], schema=location)
    _, synchronous, engine = backend.split("-")
    return SqliteCheckpointer(location, synchronous=synchronous, engine=engine)


def main() -> None:
    backend, location, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    cp = open_store(backend, location)
    head = cp.head("crash")
    last = list(cp.read("crash", since_seq=head - 1)) if head else []
    batch_no = last[0].event["batch"] if last else 0
    print("ready", head, flush=True)
    while True:
        batch_no += 1
        size = rng.randint(1, 8)
        events = [
            {
                "type": "tool_result",
                "tool_use_id": f"t{batch_no}",
                "batch": batch_no,
                "i": i,
                "n": size,
                "pad": "x" * rng.randint(0, 8_000),
            }
            for i in range(size)
        ]
        head = cp.append("crash", events, expected_head=head)
        # One write per acknowledgement; the parent counts only whole lines.
        sys.stdout.write(f"ok {head}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
