"""The file backend against a hostile directory: planted symbolic links and
special files under a session's predictable name or a temporary file's name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentlog import AgentlogError, CorruptDatabaseError, FileCheckpointer
from agentlog.log.file import session_file_name

EVENTS = [{"type": "user", "content": f"m{i}"} for i in range(6)]


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
