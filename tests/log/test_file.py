"""The file backend: the conformance suite (with and without fsync), the ownership
lock, torn tails, safe file names, fork/truncate files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest

from agentlog import Checkpointer, CorruptDatabaseError, DirectoryLockedError, FileCheckpointer
from agentlog.log.file import session_file_name
from agentlog.testing import CheckpointerConformance

from ..conftest import PYTHON, child_env


class TestFileCheckpointer(CheckpointerConformance):
    stamps_mtime = False  # a session's mtime is its file's

    def open_checkpointer(self, location: Path) -> Checkpointer:
        return FileCheckpointer(location / "sessions")


class TestFileCheckpointerFsync(CheckpointerConformance):
    race_rounds = 20
    stamps_mtime = False

    def open_checkpointer(self, location: Path) -> Checkpointer:
        return FileCheckpointer(location / "sessions", fsync=True)


EVENTS = [{"type": "user", "content": f"m{i}"} for i in range(6)]


def session_path(directory: Path, session_id: str) -> Path:
    return directory / session_file_name(session_id)


def test_second_process_is_refused_until_the_owner_closes(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from agentlog import FileCheckpointer, DirectoryLockedError\n"
        "try:\n"
        "    FileCheckpointer(sys.argv[1]).close()\n"
        "except DirectoryLockedError as exc:\n"
        "    print('refused:', exc)\n"
        "else:\n"
        "    print('opened')\n"
    )
    owner = FileCheckpointer(tmp_path)
    owner.append("s", EVENTS[:1])
    run = subprocess.run(
        [PYTHON, "-c", script, str(tmp_path)], capture_output=True, text=True, env=child_env()
    )
    assert run.stdout.startswith("refused:"), run.stdout + run.stderr
    owner.close()
    run = subprocess.run(
        [PYTHON, "-c", script, str(tmp_path)], capture_output=True, text=True, env=child_env()
    )
    assert run.stdout.strip() == "opened", run.stdout + run.stderr


def test_second_checkpointer_in_one_process_is_refused(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path), pytest.raises(DirectoryLockedError):
        FileCheckpointer(tmp_path)
    FileCheckpointer(tmp_path).close()


def test_file_names_stay_inside_and_do_not_fold_case(tmp_path: Path) -> None:
    ids = ["Report", "report", "REPORT", "a.b", "..x", "CON", "会话", "x" * 255, "a:b*c?"]
    with FileCheckpointer(tmp_path) as cp:
        for n, session_id in enumerate(ids, 1):
            cp.append(session_id, [{"type": "user", "content": "x", "n": i} for i in range(n)])
    files = sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".jsonl")
    assert len(files) == len(ids)
    assert len({name.lower() for name in files}) == len(ids)
    for name in files:
        assert name == name.lower()
        assert len(name) < 100
        assert (tmp_path / name).parent == tmp_path
    with FileCheckpointer(tmp_path) as cp:
        assert [cp.head(session_id) for session_id in ids] == list(range(1, len(ids) + 1))


def test_torn_last_line_is_dropped_on_open(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path) as cp:
        cp.append("s", EVENTS[:2])
        cp.append("s", EVENTS[2:3])
    path = session_path(tmp_path, "s")
    intact = path.read_bytes()
    with path.open("ab") as handle:
        handle.write(b'{"seq":4,"end":4,"ts":1.0,"event":{"type":"us')
    with FileCheckpointer(tmp_path) as cp:
        assert cp.head("s") == 3
        assert [e.event for e in cp.read("s")] == EVENTS[:3]
        assert cp.append("s", EVENTS[3:4], expected_head=3) == 4
    assert path.read_bytes().startswith(intact)


def test_half_written_batch_is_dropped_whole(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path) as cp:
        cp.append("s", EVENTS[:2])
    path = session_path(tmp_path, "s")
    # Two complete lines of a batch of four, then a crash.
    lines = [
        orjson.dumps({"seq": seq, "end": 6, "ts": 1.0, "event": EVENTS[seq - 1]}) + b"\n"
        for seq in (3, 4)
    ]
    with path.open("ab") as handle:
        handle.write(b"".join(lines) + b'{"seq":5,"en')
    with FileCheckpointer(tmp_path) as cp:
        assert cp.head("s") == 2
        assert [e.event for e in cp.read("s")] == EVENTS[:2]


def test_unfinished_creation_is_not_a_session(tmp_path: Path) -> None:
    path = session_path(tmp_path, "new")
    path.write_bytes(b'{"agentlog":1,"sess')
    with FileCheckpointer(tmp_path) as cp:
        assert cp.head("new") == 0
        assert cp.list() == []
        assert cp.append("new", EVENTS[:2], expected_head=0) == 2
    with FileCheckpointer(tmp_path) as cp:
        assert [e.event for e in cp.read("new")] == EVENTS[:2]


def test_damage_in_the_middle_is_reported_not_skipped(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path) as cp:
        for event in EVENTS:
            cp.append("s", [event])
    path = session_path(tmp_path, "s")
    lines = path.read_bytes().split(b"\n")
    lines[3] = b"garbage" + lines[3][7:]
    path.write_bytes(b"\n".join(lines))
    with FileCheckpointer(tmp_path) as cp:
        assert cp.head("s") == 6
        with pytest.raises(CorruptDatabaseError):
            list(cp.read("s"))


def test_file_of_another_session_is_not_served(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path) as cp:
        cp.append("a", EVENTS[:1])
    session_path(tmp_path, "a").rename(session_path(tmp_path, "b"))
    with FileCheckpointer(tmp_path) as cp, pytest.raises(CorruptDatabaseError):
        cp.head("b")


def test_foreign_files_are_ignored_and_kept(tmp_path: Path) -> None:
    (tmp_path / "notes.jsonl").write_text('{"hello": "world"}\n')
    (tmp_path / "partial.jsonl").write_text("no newline")
    (tmp_path / "README.txt").write_text("hi")
    with FileCheckpointer(tmp_path) as cp:
        cp.append("s", EVENTS[:1])
        assert [info.id for info in cp.list()] == ["s"]
    assert (tmp_path / "notes.jsonl").read_text() == '{"hello": "world"}\n'
    assert (tmp_path / "partial.jsonl").read_text() == "no newline"


def test_mid_batch_truncate_and_fork_survive_reopen(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path) as cp:
        cp.append("s", EVENTS)
        cp.fork("s", 4, "f")
        cp.truncate("s", 2)
        cp.append("f", EVENTS[:1])
    with FileCheckpointer(tmp_path) as cp:
        assert [e.event for e in cp.read("s")] == EVENTS[:2]
        assert [e.event for e in cp.read("f")] == EVENTS[:4] + EVENTS[:1]
    for path in tmp_path.glob("*.jsonl"):
        records = [orjson.loads(line) for line in path.read_bytes().splitlines()[1:]]
        assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
        assert records[-1]["end"] == records[-1]["seq"]
    assert not list(tmp_path.glob("*.tmp"))
