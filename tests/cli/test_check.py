"""``agentlog check``, ``verify`` and ``bench``, and the one-line refusals around them."""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from pathlib import Path

import pytest

from agentlog import FileCheckpointer, SqliteCheckpointer
from agentlog.cli import main
from agentlog.log.file import session_file_name

from .running import EVENTS, ONE_ENGINE, agentlog_run, ok, refused

# -- check ----------------------------------------------------------------------------------


def test_check_reports_a_damaged_file_store(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path / "files") as cp:
        for event in EVENTS:
            cp.append("s1", [event])
    path = tmp_path / "files" / session_file_name("s1")
    lines = path.read_bytes().split(b"\n")
    lines[2] = b"garbage" + lines[2][7:]
    path.write_bytes(b"\n".join(lines))
    run = agentlog_run("check", tmp_path / "files")
    assert run.returncode == 1
    assert run.stdout == f"{path}: unreadable event line 2\n"


def test_a_damaged_sqlite_file_is_refused_not_passed(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SqliteCheckpointer(db) as cp:
        cp.append("s1", EVENTS)
    data = bytearray(db.read_bytes())
    data[4096 : 4096 + 64] = b"\xff" * 64  # the first page after the header page
    db.write_bytes(bytes(data))
    run = agentlog_run("check", db)
    assert run.returncode != 0
    assert "ok" not in run.stdout.split()
    assert "Traceback" not in run.stderr
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    agentlog_run("check", db)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest


def test_check_deep_lists_every_damaged_event(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "s.db"
    with SqliteCheckpointer(db) as cp:
        cp.append("s1", EVENTS)
        cp.append("s2", EVENTS)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE events SET data = ? WHERE id = ?", (b'{"type":"user"}', (1 << 32) | 2))
    conn.execute("UPDATE events SET data = ? WHERE id = ?", (b"{", (2 << 32) | 3))
    conn.commit()
    conn.close()
    assert ok("check", db) == "ok\n"  # SQLite's own pages are sound
    run = agentlog_run("check", db, "--deep")
    assert (run.returncode, run.stderr) == (1, "")
    lines = run.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "session 's1' (tenant default), event 2",
        "session 's2' (tenant default), event 3",
    ]
    assert "payload checksum mismatch" in lines[0] and "payload checksum mismatch" in lines[1]
    report = json.loads(agentlog_run("check", db, "--deep", "--json").stdout)
    assert (report["deep"], report["ok"], report["detail"]) == (True, False, run.stdout.strip())
    files = tmp_path / "files"
    with FileCheckpointer(files) as store:
        store.append("s1", EVENTS)
    assert ok("check", files, "--deep") == "ok\n"
    path = files / session_file_name("s1")
    path.write_bytes(path.read_bytes().replace(b'"yo"', b'"YO"'))
    run = agentlog_run("check", files, "--deep")
    assert run.returncode == 1
    assert run.stdout.startswith("session 's1', event 2: ")


def test_verify_proves_a_session_unchanged_or_names_what_changed(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "s.db"
    with SqliteCheckpointer(db, hash_chain=True) as cp:
        cp.append("s1", EVENTS)
        cp.append("s2", EVENTS[:1])
        digest = cp.verify("s1").digest
    assert digest is not None
    assert ok("verify", db, "s1") == f"s1  head 3  {digest}  ok\n"
    assert ok("verify", db, "s1", "--expect", digest.upper()) == f"s1  head 3  {digest}  ok\n"
    assert [line.split()[0] for line in ok("verify", db).splitlines()] == ["s1", "s2"]
    row = json.loads(ok("verify", db, "s1", "--json"))
    assert row == {"session": "s1", "head": 3, "digest": digest, "ok": True, "problem": None}
    # Cut the last event (head and all): only the kept digest shows it.
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM events WHERE id = ?", ((1 << 32) | 3,))
    conn.execute("UPDATE sessions SET head = 2 WHERE name = 's1'")
    conn.commit()
    assert agentlog_run("verify", db, "s1").returncode == 0
    run = agentlog_run("verify", db, "s1", "--expect", digest)
    assert run.returncode == 1 and "FAILED: head digest is not the expected" in run.stdout
    # An edit, with its checksum made to match.
    forged = b'{"type":"user","content":"HI"}'
    conn.execute(
        "UPDATE events SET data = ?, crc = ? WHERE id = ?",
        (forged, zlib.crc32(forged), (1 << 32) | 1),
    )
    conn.commit()
    conn.close()
    run = agentlog_run("verify", db)
    assert run.returncode == 1
    assert run.stdout.splitlines()[0].endswith("FAILED: event 1 does not match its chain link")
    assert run.stdout.splitlines()[1].endswith("  ok")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["s1", "--expect", "abc"], "--expect takes a sha256 digest"),
        (["--expect", "0" * 64], "--expect needs exactly one SESSION"),
        (["nobody"], "no session 'nobody'"),
    ],
)
def test_verify_refuses_mistakes_in_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    db = tmp_path / "s.db"
    with SqliteCheckpointer(db, hash_chain=True) as cp:
        cp.append("s1", EVENTS)
    assert message in refused(agentlog_run("verify", db, *args))
    files = tmp_path / "files"
    with FileCheckpointer(files) as store:
        store.append("s1", EVENTS)
    assert "works on a SQLite file" in refused(agentlog_run("verify", files))


def test_verify_of_a_file_without_the_chain_says_so(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SqliteCheckpointer(db) as cp:
        cp.append("s1", EVENTS)
    # Nothing to verify is a mistake, not a failed check (nor a silent "ok").
    assert "keeps no hash chain" in refused(agentlog_run("verify", db))
    # The head digest is still recomputed: --expect compares it, and only it.
    with SqliteCheckpointer(db) as cp:
        digest = cp.verify("s1").digest
    assert digest is not None
    run = agentlog_run("verify", db, "s1", "--expect", digest)
    assert run.returncode == 0, run.stderr
    assert run.stdout.endswith(f"{digest}  ok\n")
    run = agentlog_run("verify", db, "s1", "--expect", "0" * 64)
    assert run.returncode == 1
    assert "FAILED: head digest is not the expected" in run.stdout


# -- bench ----------------------------------------------------------------------------------


@ONE_ENGINE
def test_bench_runs_the_checkouts_benchmark(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    with pytest.raises(SystemExit) as info:
        main(["bench", "--help"])
    assert info.value.code == 0
    assert "--quick" in capsys.readouterr().out


def test_migrate_errors_name_the_file_they_are_about(tmp_path: Path) -> None:
    import sqlite3

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE notes (text)")
    line = refused(agentlog_run("migrate", other, tmp_path / "new.db", "--dry-run"))
    assert "other.db" in line and "new.db" not in line  # the source, not the target
    assert not (tmp_path / "new.db").exists()


def test_a_path_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SqliteCheckpointer(db) as cp:
        cp.append("s1", EVENTS)
    odd, copy = (tmp_path / os.fsdecode(name) for name in (b"\xff.db", b"\xfe.db"))
    odd.write_bytes(db.read_bytes())  # a byte no UTF-8 name holds
    for command in (["list", odd], ["backup", db, copy]):
        line = refused(agentlog_run(*command))
        assert "SQLite needs a path in UTF-8" in line, command
    assert not copy.exists()


def test_bench_outside_a_checkout_is_one_line(tmp_path: Path) -> None:
    line = refused(agentlog_run("bench", cwd=tmp_path))
    assert line.startswith("agentlog bench: error:") and "checkout" in line


def test_bench_help_outside_a_checkout_is_help(tmp_path: Path) -> None:
    # Every other --help works anywhere; this one says where the benchmark runs.
    run = agentlog_run("bench", "--help", cwd=tmp_path)
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout.startswith("usage: agentlog bench") and "checkout" in run.stdout


def test_unrecognized_arguments_name_the_subcommand(store: Path) -> None:
    line = refused(agentlog_run("show", store, "s1", "extra"))
    assert line.startswith("agentlog show: error: unrecognized arguments: extra")
    assert "agentlog show --help" in line
