"""The command line on PostgreSQL, as a user runs it: ``python -m agentlog … postgresql://…``.

Every command that opens a store takes a PostgreSQL URL (and ``--schema``)
where it takes a SQLite file, with the same output and exit statuses; the
read commands never create the schema; a server that cannot be reached, a
wrong password or a missing psycopg is one line on stderr, and the URL's
password is never printed.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from agentlog import SqliteCheckpointer

from .cli.running import EVENTS, agentlog_run, ok, refused
from .conftest import PYTHON, OnPostgres, child_env, postgres_conninfo, postgres_schema
from .waiting import wait_until

PASSWORD = "pa55:w/rd@x"  # characters a URL must escape


def _connect() -> Any:
    import psycopg

    return psycopg.connect(postgres_conninfo(), autocommit=True)


def _conf_load_time() -> Any:
    """When the server last loaded its configuration, as a new session sees
    it (a session alive at a reload reports its own re-read instead)."""
    with _connect() as look:
        return look.execute("SELECT pg_conf_load_time()").fetchone()[0]


def _url(password: str | None = None, user: str | None = None) -> str:
    """The test server's database as a ``postgresql://`` URL."""
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(postgres_conninfo())
    who = quote(str(user or parts.get("user", "postgres")), safe="")
    if password is not None:
        who += ":" + quote(password, safe="")
    host, port, dbname = parts.get("host", "127.0.0.1"), parts.get("port", "5432"), parts["dbname"]
    return f"postgresql://{who}@{host}:{port}/{dbname}"


def _schema_exists(schema: str) -> bool:
    with _connect() as conn:
        row = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,))
        return bool(row.fetchone()[0])


class Store:
    """A PostgreSQL store in a schema of its own, holding what the SQLite tests hold."""

    def __init__(self, tmp_path: Path) -> None:
        self.schema = postgres_schema(tmp_path)
        self.url = _url(password=PASSWORD)
        self.args = [self.url, "--schema", self.schema]

    def open(self, tenant: str = "default") -> Any:
        from agentlog import PostgresCheckpointer

        return PostgresCheckpointer(
            postgres_conninfo(), schema=self.schema, tenant=tenant, pool_max_size=2
        )


@pytest.fixture
def pg(tmp_path: Path, postgres_server: str) -> Iterator[Store]:
    store = Store(tmp_path)
    with store.open() as log:
        log.append("s1", EVENTS)
    with store.open("acme") as log:
        log.append("chat-9", [{"type": "user", "content": "Can I get a refund?"}])
    yield store
    with _connect() as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {store.schema} CASCADE")


def _clock_free(text: str) -> str:
    """``text`` with each ``HH:MM:SS`` clock time masked."""
    return re.sub(r"\b\d\d:\d\d:\d\d\b", "hh:mm:ss", text)


class TestCommands(OnPostgres):
    def test_read_commands_print_what_they_print_for_sqlite(
        self, pg: Store, tmp_path: Path
    ) -> None:
        db = tmp_path / "same.db"
        with SqliteCheckpointer(db) as log:
            log.append("s1", EVENTS)
        for command in (["show", "{}", "s1"], ["check"], ["tail", "{}", "s1", "--once"]):
            on_sqlite = ok(command[0], db, *[part for part in command[1:] if part != "{}"])
            argv = [command[0], *pg.args, *[part for part in command[1:] if part != "{}"]]
            # The two stores were written at different moments: a clock time
            # may differ by a second under load, and nothing else may.
            assert _clock_free(ok(*argv)) == _clock_free(on_sqlite), command
        listed = ok("list", *pg.args).splitlines()
        assert [line.split("\t")[:2] for line in listed] == [["s1", "3"]]
        everyone = [
            line.split("\t")[:3] for line in ok("list", *pg.args, "--all-tenants").split("\n")
        ]
        assert everyone[:2] == [["acme", "chat-9", "1"], ["default", "s1", "3"]]
        assert (
            ok("show", *pg.args, "chat-9", "--tenant", "acme") == "     user: Can I get a refund?\n"
        )
        lines = ok("show", *pg.args, "s1", "--json", "--since", "1").splitlines()
        assert [json.loads(line)["seq"] for line in lines] == [2, 3]
        assert json.loads(ok("check", *pg.args, "--json")) == {
            "store": pg.url.replace(quote(PASSWORD, safe=""), "***"),
            "kind": "postgresql",
            "deep": False,
            "ok": True,
            "detail": "ok",
        }

    def test_an_unknown_session_says_which_tenant_has_it(self, pg: Store) -> None:
        line = refused(agentlog_run("show", *pg.args, "chat-9"))
        assert line.endswith("(it is in tenant 'acme': add --tenant acme)"), line
        assert PASSWORD not in line and quote(PASSWORD, safe="") not in line

    def test_fork_truncate_and_gc_write(self, pg: Store) -> None:
        assert ok("fork", *pg.args, "s1", "2", "s2") == "forked s1 at 2 into s2 (head 2)\n"
        assert ok("truncate", *pg.args, "s2", "1") == "s2: head 1\n"
        assert ok("truncate", *pg.args, "s2", "5") == "s2: head 1 (nothing after 5 to drop)\n"
        with pg.open() as log:
            assert [event.event for event in log.read("s2")] == EVENTS[:1]
            assert [event.event for event in log.read("s1")] == EVENTS
        assert ok("gc", *pg.args, "--idle-days", "1") == (
            "deleted 0 session(s) idle for more than 1 day(s)\n"
        )
        time.sleep(0.05)  # the clock moves past the sessions' last writes
        assert ok("gc", *pg.args, "--idle-days", "0", "--dry-run").splitlines() == [
            "would delete s1",
            "would delete s2",
            "would delete 2 session(s) idle for more than 0 day(s)",
        ]
        assert ok("gc", *pg.args, "--idle-days", "0").splitlines()[-1] == (
            "deleted 2 session(s) idle for more than 0 day(s)"
        )
        emptied = agentlog_run("list", *pg.args)  # the default tenant: a note, not an error
        assert (emptied.returncode, emptied.stdout) == (0, "")
        assert "note: no sessions in tenant 'default'" in emptied.stderr
        assert "its tenants: 'acme'" in emptied.stderr
        assert ok("list", *pg.args, "--tenant", "acme").startswith("chat-9\t1\t")

    def test_stats_counts_sessions_events_and_table_sizes(self, pg: Store) -> None:
        from agentlog.engine.postgres import SCHEMA_VERSION

        figures = json.loads(ok("stats", *pg.args, "--json"))
        assert (figures["sessions"], figures["tenants"], figures["events"]) == (2, 2, 4)
        assert figures["schema"] == pg.schema and figures["schema_version"] == SCHEMA_VERSION
        assert [
            (row["tenant"], row["session"], row["events"]) for row in figures["largest_sessions"]
        ] == [("default", "s1", 3), ("acme", "chat-9", 1)]
        assert figures["relation_bytes"]["events"] > 0
        assert figures["total_bytes"] == sum(figures["relation_bytes"].values())
        text = ok("stats", *pg.args).splitlines()
        assert text[0].endswith(
            f"schema {pg.schema}: version {SCHEMA_VERSION}, PostgreSQL {figures['server_version']}"
        )
        assert text[1] == "sessions 2 in 2 tenant(s), events 4"
        assert text[2].startswith("tables ") and "events " in text[2]
        assert text[3:] == [
            "largest sessions:",
            "           3  default/s1",
            "           1  acme/chat-9",
        ]

    def test_check_finds_a_missing_event(self, pg: Store) -> None:
        with _connect() as conn:
            conn.execute(f"DELETE FROM {pg.schema}.events WHERE session = 's1' AND seq = 2")
        run = agentlog_run("check", *pg.args)
        assert run.returncode == 1, run
        assert run.stdout == "session default/s1: head 3, but 2 event(s) numbered 1..3\n"

    def test_tail_follows_another_processs_appends(self, pg: Store) -> None:
        env = {**child_env(), "PYTHONUNBUFFERED": "1"}
        argv = ["tail", *pg.args, "s1", "--json", "--since", "2"]
        with (
            pg.open() as owner,
            subprocess.Popen(
                [PYTHON, "-m", "agentlog", *argv], stdout=subprocess.PIPE, text=True, env=env
            ) as child,
        ):
            assert child.stdout is not None
            try:
                assert json.loads(child.stdout.readline())["seq"] == 3
                owner.append("s1", [{"type": "user", "content": "more"}])
                assert json.loads(child.stdout.readline())["event"]["content"] == "more"
            finally:
                child.terminate()

    def test_backup_says_to_use_pg_dump_without_connecting(self) -> None:
        # Port 1: nothing listens, so a connection attempt would be the error.
        url = _url(password=PASSWORD).rsplit("@", 1)[0] + "@127.0.0.1:1/agentlog_test"
        line = refused(agentlog_run("backup", url, "copy.db", "--schema", "mine"))
        assert "pg_dump --schema=mine --format=custom" in line, line
        assert PASSWORD not in line and quote(PASSWORD, safe="") not in line


# -- never creating anything ----------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["list"],
        ["list", "--all-tenants"],
        ["show", "s1"],
        ["tail", "s1", "--once"],
        ["tail", "s1"],
        ["check"],
        ["stats"],
        ["gc", "--idle-days", "1", "--dry-run"],
        ["gc", "--idle-days", "1"],
        ["fork", "s1", "1", "s2"],
        ["truncate", "s1", "0"],
    ],
)
def test_no_command_creates_the_schema(
    tmp_path: Path, postgres_server: str, command: list[str]
) -> None:
    schema = postgres_schema(tmp_path)
    line = refused(agentlog_run(command[0], _url(), *command[1:], "--schema", schema))
    assert f"no agentlog store in schema {schema!r}" in line, line
    assert not _schema_exists(schema)


# -- what goes wrong, in one line, without the password ---------------------------------------


def _no_password(run: subprocess.CompletedProcess[str]) -> str:
    line = refused(run)
    for text in (run.stdout, run.stderr):
        assert PASSWORD not in text and quote(PASSWORD, safe="") not in text, text
    return line


def test_an_unreachable_server_is_one_line_without_the_password() -> None:
    url = f"postgresql://agent:{quote(PASSWORD, safe='')}@127.0.0.1:1/agents"
    for command in (
        ["list", url],
        ["show", url, "s1"],
        ["stats", url],
        ["gc", url, "--idle-days", "1"],
    ):
        line = _no_password(agentlog_run(*command))
        assert line.startswith(
            f"agentlog {command[0]}: error: postgresql://agent:***@127.0.0.1:1/agents: "
        )
        assert "Connection refused" in line or "connection failed" in line, line
    line = _no_password(
        agentlog_run("list", f"postgres://agent@127.0.0.1:1/agents?password={PASSWORD}")
    )
    assert "?password=***" in line, line


def test_a_migration_source_url_is_one_line_without_its_password(tmp_path: Path) -> None:
    # libpq quotes a URL's contents in some errors (here, a bad %-escape in
    # the password itself); the source's password is hidden as the target's is.
    for password in (quote(PASSWORD, safe=""), "p%zzsecret"):
        url = f"postgresql://agent:{password}@127.0.0.1:1/agents"
        run = agentlog_run("migrate", url, str(tmp_path / "out.db"))
        line = refused(run)
        assert password not in run.stdout + run.stderr, line
        assert PASSWORD not in run.stdout + run.stderr, line
        assert line.startswith("agentlog migrate: error: "), line
    assert not (tmp_path / "out.db").exists()


def test_a_wrong_password_is_one_line_without_it(postgres_server: str, tmp_path: Path) -> None:
    """A role that logs in with a password (scram-sha-256 for it alone, in pg_hba.conf)."""
    role = "cli_pw_" + postgres_schema(tmp_path)[2:12]
    with _connect() as conn:
        hba = str(conn.execute("SHOW hba_file").fetchone()[0])
        try:
            original = Path(hba).read_text()
            Path(hba).write_text(f"host all {role} 0.0.0.0/0 scram-sha-256\n" + original)
        except OSError as exc:
            pytest.skip(f"cannot add a password rule to the server's pg_hba.conf: {exc}")
        try:
            loaded = _conf_load_time()
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'right-one'")
            conn.execute(f"GRANT CREATE ON DATABASE {conn.info.dbname} TO {role}")
            # The reload is asynchronous: new sessions see it once it is done.
            assert wait_until(lambda: _conf_load_time() > loaded)
            schema = postgres_schema(tmp_path)
            right = _url(password="right-one", user=role)
            refused(agentlog_run("list", right, "--schema", schema))  # no store: but logged in
            run = agentlog_run("list", _url(password=PASSWORD, user=role), "--schema", schema)
            line = _no_password(run)
            assert "password authentication failed" in line, line
        finally:
            Path(hba).write_text(original)
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(f"REVOKE CREATE ON DATABASE {conn.info.dbname} FROM {role}")
            conn.execute(f"DROP ROLE {role}")


WITHOUT_PSYCOPG = """
import sys
sys.modules["psycopg"] = None  # an import of it fails, as if it were not installed
sys.modules["psycopg_pool"] = None
from agentlog.cli import main
main(sys.argv[1:])
"""


def test_without_psycopg_a_postgresql_url_is_one_line() -> None:
    url = f"postgresql://agent:{quote(PASSWORD, safe='')}@127.0.0.1:1/agents"
    run = subprocess.run(
        [PYTHON, "-c", WITHOUT_PSYCOPG, "list", url],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    line = _no_password(run)
    assert "pip install 'agentlog[postgres]'" in line, line


def test_schema_is_for_postgresql_only(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    SqliteCheckpointer(db).close()
    line = refused(agentlog_run("list", db, "--schema", "agentlog"))
    assert line.startswith("agentlog list: error: --schema is for a PostgreSQL store"), line


def test_a_bad_schema_name_is_one_line() -> None:
    line = refused(
        agentlog_run("list", "postgresql://agent@127.0.0.1:1/agents", "--schema", "Bad;")
    )
    assert "schema must match" in line, line


def test_a_key_value_connection_string_works_too(pg: Store, tmp_path: Path) -> None:
    """libpq's ``host=… dbname=…`` form, as the test server's conninfo is written
    (a file of such a name that exists is still a file)."""
    assert ok("list", postgres_conninfo(), "--schema", pg.schema).startswith("s1\t3\t")
    quoted = PASSWORD.replace("'", "\\'")
    for given in (f"password='{quoted}'", f"password={PASSWORD}"):
        conninfo = f"host=127.0.0.1 port=1 dbname=agents user=agent {given}"
        line = _no_password(agentlog_run("list", conninfo))
        assert "host=127.0.0.1 port=1 dbname=agents user=agent password=***: " in line, line
    db = tmp_path / "host=db.sqlite"
    with SqliteCheckpointer(db) as log:
        log.append("s1", EVENTS)
    run = subprocess.run(
        [PYTHON, "-m", "agentlog", "list", db.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("s1\t3\t")
