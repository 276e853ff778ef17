"""agentlog migrate keeps everything a JSON v1 producer legitimately writes.

The fixtures are JSON *text*, written by hand from the format, so the lone
surrogate escapes, the integers beyond 64 bits and the producer's own times
are really in the files (a Python dict could not carry some of them).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from agentlog import SqliteCheckpointer, SqliteStorage, fold_events
from agentlog.cli import main
from agentlog.migrate import epoch_seconds, legacy_value, migrate

#: A conversation with serial tool calls, a thinking block with its signature,
#: Chinese text and emoji; a tool result and the title hold lone surrogates (as
#: JavaScript's JSON.stringify writes them) and a tool input a number beyond 64
#: bits; every message carries its own time.
TOOLS = r"""{"version":1,"id":"👩‍💻-pairing","title":"pair \ud83d session","revision":7,
"createdAt":"2026-08-01T09:00:00.000Z","updatedAt":"2026-08-01T09:04:00.000Z",
"lastActiveAt":"2026-08-01T09:05:30.500Z",
"messages":[
 {"role":"user","content":"统计一下 🦜 文件","createdAt":"2026-08-01T09:00:01.000Z"},
 {"role":"assistant","createdAt":"2026-08-01T09:00:02.000Z","content":[
   {"type":"thinking","thinking":"count them","signature":"EqQBCkYIBxgCKkB"},
   {"type":"tool_use","id":"toolu_1","name":"count","input":{"limit":18446744073709552000,"path":"."}}]},
 {"role":"tool","tool_call_id":"toolu_1","content":"broken \udc00 half",
  "createdAt":"2026-08-01T09:00:03.000Z"},
 {"role":"assistant","content":"3 个文件 ✅","createdAt":"2026-08-01T09:00:04.000Z"}],
"runs":[{"id":"run_1","status":"completed","createdAt":"2026-08-01T09:00:01.000Z","usage":{"tokens":-99999999999999999999}}]}
"""

#: An id with an ideographic space; times as JavaScript epoch milliseconds; the
#: messages carry no time of their own.
SPACE = r"""{"version":1,"id":"周报　八月","createdAt":1754038800000,"lastActiveAt":1754039400000,
"messages":[{"role":"user","content":"写周报"},{"role":"assistant","content":"好的"}],"runs":[]}
"""

#: An empty session, from an older release (no revision), active later than the others.
EMPTY = r"""{"version":1,"id":"empty","createdAt":"2026-09-01T08:00:00Z","messages":[]}
"""

#: An id no store can take as it is (a control character): it gets a
#: deterministic stand-in and keeps the original in its metadata. No times at
#: all: the file's own modification time stands in.
BELL = r"""{"version":1,"id":"ring\u0007bell","messages":[{"role":"user","content":"ding"}]}
"""

FIXTURES = {
    "pairing.json": TOOLS,
    "weekly.json": SPACE,
    "empty.json": EMPTY,
    "bell.json": BELL,
}
BELL_MTIME = 1_700_000_000.25


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = tmp_path / "legacy"
    sessions = root / "sessions"
    sessions.mkdir(parents=True)
    for name, text in FIXTURES.items():
        (sessions / name).write_text(text, encoding="utf-8")
    os.utime(sessions / "bell.json", (BELL_MTIME, BELL_MTIME))
    return root


def iso(text: str) -> float:
    value = epoch_seconds(text)
    assert value is not None
    return value


def originals(source: Path) -> dict[str, Any]:
    """Each file as Python's json reads it: lone surrogates and big integers exact."""
    return {
        f"sessions/{name}": json.loads((source / "sessions" / name).read_text("utf-8"))
        for name in FIXTURES
    }


def canonical(value: Any) -> str:
    # Equal text means equal values, types included (an int is not a float).
    return json.dumps(value, ensure_ascii=True, sort_keys=True)


def test_every_case_migrates_in_one_run_and_the_dry_run_predicts_it(
    source: Path, tmp_path: Path, engine: str
) -> None:
    target = tmp_path / "target.db"
    plan = migrate(source, target, dry_run=True, engine=engine)
    assert not target.exists()
    report = migrate(source, target, backup_dir=tmp_path / "backup", engine=engine)
    assert report.migrated == 4 and not report.conflicts
    assert [
        (s.source_key, s.session_id, s.action, s.original_id, s.notes) for s in plan.sessions
    ] == [(s.source_key, s.session_id, s.action, s.original_id, s.notes) for s in report.sessions]
    by_key = {s.source_key: s for s in report.sessions}
    assert by_key["sessions/pairing.json"].session_id == "👩\u200d💻-pairing"
    assert by_key["sessions/weekly.json"].session_id == "周报\u3000八月"
    bell = by_key["sessions/bell.json"]
    assert bell.original_id == "ring\x07bell"
    assert bell.session_id.startswith("ring_bell~") and len(bell.session_id) == 22
    assert any("stored as" in note for note in bell.notes)
    assert any("exact JSON text" in note for note in by_key["sessions/pairing.json"].notes)
    assert by_key["sessions/empty.json"].notes == ()
    # A re-run skips every file.
    again = migrate(source, target, backup_dir=tmp_path / "again", engine=engine)
    assert again.migrated == 0 and again.skipped == 4


def test_rebuilding_each_file_from_storage_gives_back_every_value(
    source: Path, tmp_path: Path, engine: str
) -> None:
    target = tmp_path / "target.db"
    report = migrate(source, target, backup_dir=tmp_path / "backup", engine=engine)
    ids = {s.source_key: s.session_id for s in report.sessions}
    with SqliteStorage.open(target, engine=engine) as storage:
        for key, original in originals(source).items():
            loaded = storage.sessions.load("default", ids[key])
            metadata = loaded.session.metadata
            rebuilt = dict(legacy_value(metadata)["header"])
            rebuilt["messages"] = [legacy_value(item.event) for item in loaded.items]
            rebuilt["runs"] = legacy_value(metadata)["runs"]
            if "runs" not in original:
                original = {**original, "runs": []}
            assert canonical(rebuilt) == canonical(original), key
    # The exact values really are the odd ones (not silently normalised).
    tools = originals(source)["sessions/pairing.json"]
    assert tools["title"] == "pair \ud83d session"
    assert tools["messages"][1]["content"][1]["input"]["limit"] == 18446744073709552000


def test_the_stored_events_read_and_fold_through_every_api(
    source: Path, tmp_path: Path, engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "target.db"
    migrate(source, target, backup_dir=tmp_path / "backup", engine=engine)
    pairing = "👩\u200d💻-pairing"
    with SqliteCheckpointer(target, engine=engine) as log:
        events = list(log.read(pairing))
        assert [e.type for e in events] == ["user", "assistant", "tool_result", "assistant"]
        # The readable stand-ins: U+FFFD for the lone surrogate, the float
        # JavaScript read the big integer as.
        assert events[2].event["content"] == "broken \ufffd half"
        assert events[2].event["tool_use_id"] == "toolu_1"
        tool_input = events[1].event["content"][1]["input"]
        assert tool_input["limit"] == 18446744073709552000.0
        assert isinstance(tool_input["limit"], float)
        assert "legacy_json" in events[2].event and "legacy_json" not in events[0].event
        for shape in ("anthropic", "openai"):
            folded = fold_events(events, shape=shape)
            assert folded[0] == {"role": "user", "content": "统计一下 🦜 文件"}
            assert folded[-1] == {"role": "assistant", "content": "3 个文件 ✅"}
        assert log.head("周报\u3000八月") == 2
    assert main(["show", str(target), pairing]) is None
    shown = capsys.readouterr().out
    assert "broken \ufffd half" in shown and "3 个文件 ✅" in shown
    assert main(["list", str(target), "--json"]) is None
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {row["id"] for row in listed} >= {pairing, "周报\u3000八月", "empty"}


def test_original_times_are_kept_and_list_orders_by_real_activity(
    source: Path, tmp_path: Path, engine: str
) -> None:
    target = tmp_path / "target.db"
    before = time.time()
    report = migrate(source, target, backup_dir=tmp_path / "backup", engine=engine)
    bell = next(s.session_id for s in report.sessions if s.original_id)
    with SqliteStorage.open(target, engine=engine) as storage:
        record = storage.sessions.get("default", "👩\u200d💻-pairing")
        assert record.created_at == iso("2026-08-01T09:00:00Z")
        assert record.updated_at == iso("2026-08-01T09:05:30.500Z")
        weekly = storage.sessions.get("default", "周报\u3000八月")
        assert (weekly.created_at, weekly.updated_at) == (1754038800.0, 1754039400.0)
        empty = storage.sessions.get("default", "empty")
        assert empty.created_at == empty.updated_at == iso("2026-09-01T08:00:00Z")
        assert storage.sessions.get("default", bell).updated_at == BELL_MTIME
    with SqliteCheckpointer(target, engine=engine) as log:
        times = [e.ts for e in log.read("👩\u200d💻-pairing")]
        assert times == [iso(f"2026-08-01T09:00:0{n}Z") for n in (1, 2, 3, 4)]
        # Messages without times of their own: the session's creation time.
        assert [e.ts for e in log.read("周报\u3000八月")] == [1754038800.0] * 2
        assert [e.ts for e in log.read(bell)] == [BELL_MTIME]
        listed = [(info.id, info.mtime) for info in log.list()]
    assert all(mtime < before for _, mtime in listed)  # never the migration's clock
    order = [session_id for session_id, _ in sorted(listed, key=lambda row: row[1])]
    assert order == [bell, "周报\u3000八月", "👩\u200d💻-pairing", "empty"]


def test_provenance_is_in_the_metadata_and_the_ledger(
    source: Path, tmp_path: Path, engine: str
) -> None:
    target = tmp_path / "target.db"
    report = migrate(
        source, target, source_id="legacy-app", backup_dir=tmp_path / "b", engine=engine
    )
    bell = next(s.session_id for s in report.sessions if s.original_id)
    with SqliteStorage.open(target, engine=engine) as storage:
        meta = storage.sessions.get("default", "empty").metadata
        assert meta["source"] == {"format": "json-v1", "key": "sessions/empty.json"}
        assert storage.sessions.get("default", bell).metadata["source"] == {
            "format": "json-v1",
            "key": "sessions/bell.json",
            "id": "ring\x07bell",
        }
    db = sqlite3.connect(target)
    try:
        rows = db.execute(
            "SELECT source_key, session_id, source_format FROM migration_ledger"
            " WHERE source_id = 'legacy-app'"
        ).fetchall()
    finally:
        db.close()
    assert sorted(rows) == sorted((s.source_key, s.session_id, "json-v1") for s in report.sessions)
    assert all(key.startswith("sessions/") for key, _, _ in rows)


def test_an_empty_session_arrives_at_revision_0(source: Path, tmp_path: Path, engine: str) -> None:
    target = tmp_path / "target.db"
    migrate(source, target, backup_dir=tmp_path / "backup", engine=engine)
    with SqliteStorage.open(target, engine=engine) as storage:
        assert storage.sessions.get("default", "empty").revision == 0
        assert storage.sessions.get("default", "周报\u3000八月").revision == 1


def test_a_ledger_written_by_an_earlier_release_is_still_recognised(
    source: Path, tmp_path: Path
) -> None:
    """Earlier releases recorded ``X.json``, not ``sessions/X.json``: a re-run
    after upgrading must skip those files, not report them as conflicts."""
    target = tmp_path / "target.db"
    migrate(source, target, source_id="app", backup_dir=tmp_path / "b1")
    db = sqlite3.connect(target)
    db.execute("UPDATE migration_ledger SET source_key = substr(source_key, 10)")
    db.commit()
    db.close()
    plan = migrate(source, target, source_id="app", dry_run=True)
    assert {s.action for s in plan.sessions} == {"skip"}


def test_the_cli_reports_renamed_ids_and_exact_text(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["migrate", str(source), str(tmp_path / "t.db"), "--dry-run"]) is None
    out = capsys.readouterr().out
    assert "'ring\\x07bell' is stored as 'ring_bell~" in out
    assert "kept as exact JSON text" in out
    assert "\x07" not in out
