"""A 256 MB artifact streams in and out of SQLite without being held in memory."""

from __future__ import annotations

import json
from pathlib import Path

from ..conftest import PYTHON, child_env
from ..memory_use import run_fresh_peak

SCRIPT = r"""
import hashlib, json, sys
from agentlog import SqliteStorage
from memory_use import current_rss_bytes, mb, peak_rss_bytes

SIZE = 256 * 1024 * 1024

class Source:
    # 256 MB made on the fly, never all in memory.
    def __init__(self):
        self.sent = 0
        self.digest = hashlib.sha256()
    def read(self, size):
        size = min(size, SIZE - self.sent)
        block = (self.sent // 4096).to_bytes(8, "little") * (size // 8) + b"x" * (size % 8)
        self.sent += size
        self.digest.update(block)
        return block

with SqliteStorage.open(sys.argv[1], engine=sys.argv[2]) as storage:
    start = mb(current_rss_bytes())
    source = Source()
    info = storage.artifacts.put("t", "big", source, "application/octet-stream", None)
    back = hashlib.sha256()
    read = 0
    with storage.artifacts.open("t", "big") as stream:
        while chunk := stream.read(1 << 20):
            back.update(chunk)
            read += len(chunk)
    listed = storage.artifacts.list("t")
    print(json.dumps({
        "size": info.size, "read": read, "stored_sha": info.sha256,
        "source_sha": source.digest.hexdigest(), "read_sha": back.hexdigest(),
        "start_mb": start, "peak_mb": mb(peak_rss_bytes()),
        "listed": [i.artifact_id for i in listed],
    }))
"""


def test_256_mb_streams_through_with_flat_memory(tmp_path: Path, engine: str) -> None:
    command = [PYTHON, "-c", SCRIPT, str(tmp_path / "big.db"), engine]
    run = run_fresh_peak(command, child_env(), timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert result["size"] == result["read"] == 256 * 1024 * 1024
    assert result["stored_sha"] == result["source_sha"] == result["read_sha"]
    assert result["listed"] == ["big"]
    # The whole artifact is 256 MB; the process may grow by a few chunks, not by it.
    assert result["peak_mb"] - result["start_mb"] < 64, result
