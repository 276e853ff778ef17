"""The file backend against a hostile directory: planted symbolic links and
special files under a session's predictable name or a temporary file's name."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentlog import (
    AgentlogError,
    CorruptDatabaseError,
    FileCheckpointer,
    StorageUnavailableError,
)
from agentlog.log.file import session_file_name

from .test_file import EVENTS


def test_append_does_not_create_the_target_of_a_dangling_symlink(tmp_path: Path) -> None:
    store, outside = tmp_path / "store", tmp_path / "outside"
    store.mkdir()
    outside.mkdir()
    target = outside / "planted.txt"
    (store / session_file_name("s")).symlink_to(target)
    with (
        FileCheckpointer(store) as cp,
        pytest.raises(CorruptDatabaseError, match="not a regular file"),
    ):
        cp.append("s", EVENTS[:1])
    assert not target.exists()
    assert list(outside.iterdir()) == []


def test_append_does_not_overwrite_a_symlinked_outside_file(tmp_path: Path) -> None:
    # An outside file with no newline looks like "a header that never completed".
    store = tmp_path / "store"
    store.mkdir()
    target = tmp_path / "precious.txt"
    target.write_bytes(b"precious data, no trailing newline")
    (store / session_file_name("s")).symlink_to(target)
    with FileCheckpointer(store) as cp:
        for call in (
            lambda: cp.append("s", EVENTS[:1]),
            lambda: cp.head("s"),
            lambda: list(cp.read("s")),
            lambda: cp.fork("s", 0, "t"),
        ):
            with pytest.raises(CorruptDatabaseError, match="not a regular file"):
                call()
        assert [info.id for info in cp.list()] == []
        assert cp.check_integrity() == (True, "ok")
    assert target.read_bytes() == b"precious data, no trailing newline"


def test_a_symlink_to_a_session_file_is_not_read_or_repaired(tmp_path: Path) -> None:
    # A torn tail in a file outside the store, reached through a symlink, is not cut off.
    elsewhere, store = tmp_path / "elsewhere", tmp_path / "store"
    with FileCheckpointer(elsewhere) as cp:
        cp.append("s", EVENTS[:2])
    outside = elsewhere / session_file_name("s")
    with outside.open("ab") as handle:
        handle.write(b'{"seq":3,"end":3,"ts":1.0,"ev')
    before = outside.read_bytes()
    store.mkdir()
    (store / session_file_name("s")).symlink_to(outside)
    with FileCheckpointer(store) as cp, pytest.raises(CorruptDatabaseError):
        cp.head("s")
    with FileCheckpointer(store, read_only=True) as cp, pytest.raises(CorruptDatabaseError):
        cp.head("s")
    assert outside.read_bytes() == before


def test_a_fifo_under_a_session_name_is_refused_without_hanging(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / session_file_name("s"))
    with FileCheckpointer(tmp_path) as cp:
        with pytest.raises(CorruptDatabaseError, match="not a regular file"):
            cp.append("s", EVENTS[:1])
        assert cp.list() == []
        cp.append("other", EVENTS[:1])
        assert [info.id for info in cp.list()] == ["other"]
        assert cp.check_integrity()[0]


def test_mid_batch_truncate_and_fork_never_write_through_a_planted_temp_symlink(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me")
    with FileCheckpointer(store) as cp:
        cp.append("s", EVENTS)
        # The predictable temporary names a rewrite used to take.
        for session_id in ("s", "f"):
            name = session_file_name(session_id)
            (store / f"{name}.tmp").symlink_to(victim)
        cp.fork("s", 3, "f")
        cp.truncate("s", 2)
        assert [e.event for e in cp.read("s")] == EVENTS[:2]
        assert [e.event for e in cp.read("f")] == EVENTS[:3]
    assert victim.read_bytes() == b"keep me"
    for path in store.glob("*.jsonl"):
        assert not path.is_symlink()


def test_temp_file_names_are_unpredictable_and_exclusive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A symlink planted at the temporary name after it is chosen (a race) is
    # refused by O_EXCL | O_NOFOLLOW instead of being written through.
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me")
    store = tmp_path / "store"
    real_open = os.open
    planted: list[str] = []

    def plant_then_open(path: str | os.PathLike[str], flags: int, *args: int) -> int:
        if str(path).endswith(".tmp") and not planted:
            planted.append(str(path))
            os.symlink(victim, path)
        return real_open(path, flags, *args)

    with FileCheckpointer(store) as cp:
        cp.append("s", EVENTS)
        monkeypatch.setattr(os, "open", plant_then_open)
        with pytest.raises(AgentlogError):
            cp.truncate("s", 2)
        monkeypatch.undo()
        assert [e.event for e in cp.read("s")] == EVENTS
    assert planted and not planted[0].endswith(session_file_name("s") + ".tmp")
    assert victim.read_bytes() == b"keep me"


def test_a_planted_lock_symlink_is_not_followed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    target = tmp_path / "created-by-lock"
    (store / ".agentlog.lock").symlink_to(target)
    with pytest.raises(AgentlogError):
        FileCheckpointer(store)
    assert not target.exists()


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs of our own (mounting needs the privilege to mount)."""
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    run = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {run.stderr.strip() or run.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)


def fill(directory: Path) -> None:
    """Write a filler file until the file system is full."""
    with (directory / "filler").open("wb", buffering=0) as handle:
        chunk = b"x" * 4096
        while True:
            try:
                handle.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                if len(chunk) == 1:
                    return
                chunk = chunk[: len(chunk) // 2]


def test_fork_and_truncate_on_a_full_disk_are_typed_and_leave_nothing(full_disk: Path) -> None:
    store = full_disk / "store"
    big = [{"type": "user", "content": "x" * 2000} for _ in range(20)]
    with FileCheckpointer(store) as cp:
        cp.append("s", big)
        path = store / session_file_name("s")
        before = path.read_bytes()
        fill(full_disk)
        with pytest.raises(StorageUnavailableError, match="fork"):
            cp.fork("s", 20, "f")
        with pytest.raises(StorageUnavailableError, match="truncate"):
            cp.truncate("s", 10)  # inside the batch: a rewrite
        with pytest.raises(StorageUnavailableError, match="append"):
            cp.append("new", big[:1])
        assert list(store.glob("*.tmp")) == []
        assert sorted(p.name for p in store.iterdir()) == sorted([".agentlog.lock", path.name])
        assert path.read_bytes() == before
        assert cp.head("s") == 20
        assert cp.head("f") == 0
        assert [e.event for e in cp.read("s")] == big
        (full_disk / "filler").unlink()
        assert cp.fork("s", 20, "f") == 20
        assert cp.truncate("s", 10) == 10
    with FileCheckpointer(store) as cp:
        assert [e.event for e in cp.read("s")] == big[:10]
        assert [e.event for e in cp.read("f")] == big


def test_a_failing_append_in_a_group_refuses_only_itself(tmp_path: Path) -> None:
    """Each append of a group is a write of its own here: one refused for a
    second name (a hard link from outside) must not report the others, which
    were written, as failed — a caller retrying those would write them twice."""
    store = tmp_path / "store"
    log = FileCheckpointer(store)
    log.append("bad", EVENTS[:1])
    os.link(store / session_file_name("bad"), tmp_path / "outside-link")
    port = log.writer_port()
    good, bad, after = (
        port.prepare_append("good", EVENTS[1:2], 0),
        port.prepare_append("bad", EVENTS[2:3]),
        port.prepare_append("after", EVENTS[3:4], 0),
    )
    results = port.append_prepared([good, bad, after])
    assert results[0] == 1 and results[2] == 1
    assert isinstance(results[1], CorruptDatabaseError)
    # The first append failing: nothing of the group is written, and it raises.
    with pytest.raises(CorruptDatabaseError):
        port.append_prepared([bad, port.prepare_append("never", EVENTS[4:5])])
    log.close()
    (tmp_path / "outside-link").unlink()
    with FileCheckpointer(store) as reopened:
        assert [e.event["content"] for e in reopened.read("good")] == ["m1"]
        assert [e.event["content"] for e in reopened.read("after")] == ["m3"]
        assert reopened.head("bad") == 1 and reopened.head("never") == 0
