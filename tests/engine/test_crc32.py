"""The C engine's CRC-32 is zlib's, at every length: the table path, the
carry-less-multiplication folding (runs of 64 bytes and more) and their seam."""

from __future__ import annotations

import random
import zlib
from pathlib import Path

from ..conftest import require_engine


def test_the_c_crc32_is_zlibs_at_every_length() -> None:
    require_engine("c")
    from agentlog.engine import cengine

    rng = random.Random(20261130)
    lengths = [*range(0, 300), 1000, 4095, 4096, 4097, 65536 + 15, 1 << 20]
    for size in lengths:
        data = rng.randbytes(size)
        assert cengine.crc32(data) == zlib.crc32(data), size
        assert cengine.crc32(data, 0xDEADBEEF) == zlib.crc32(data, 0xDEADBEEF), size
    # Unaligned views, and the bytes JSON payloads are made of.
    data = rng.randbytes(5000)
    for start in range(0, 17):
        view = memoryview(data)[start : start + 777]
        assert cengine.crc32(view) == zlib.crc32(view), start
    text = b'{"type":"user","content":"' + b"x" * 500 + b'"}'
    assert cengine.crc32(text) == zlib.crc32(text)


def test_the_c_check_of_file_lines_finds_the_first_bad_one(tmp_path: Path) -> None:
    require_engine("c")
    from agentlog import FileCheckpointer
    from agentlog.engine import cengine
    from agentlog.log.file import session_file_name

    with FileCheckpointer(tmp_path) as store:
        store.append("s", [{"type": "user", "content": f"m {n}"} for n in (1, 2, 3)])
    lines = (tmp_path / session_file_name("s")).read_bytes().splitlines(keepends=True)[1:]
    old = b'{"seq":4,"end":4,"ts":1.5,"event":{"type":"user","content":"old"}}\n'
    assert cengine.first_bad_line(b"".join(lines) + old) == -1
    assert cengine.first_bad_line(b"") == -1
    for index in range(3):
        damaged = list(lines)
        damaged[index] = damaged[index].replace(b"m ", b"M ")
        assert cengine.first_bad_line(b"".join(damaged) + old) == index
    cut = lines[1][:-3] + b"\n"  # the event's closing bytes lost
    assert cengine.first_bad_line(lines[0] + cut + lines[2]) == 1
