"""The viewer's fixtures: a store of each kind, and a viewer served on a real port.

A store is written through the public API (the writer), then shown by a
viewer opened as ``agentlog serve`` opens it (read-only), served by uvicorn
on a free loopback port in a thread of the test process.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from agentlog import FileCheckpointer, SqliteCheckpointer
from agentlog.cli.serve import viewer_source
from agentlog.log.file import session_file_name
from agentlog.serve import Source, access_token, guarded_app, is_loopback
from agentlog.serve.app import MAX_STREAMS
from agentlog.serve.server import (
    HEADER_SECONDS,
    MAX_CONNECTIONS,
    QuietServer,
    listening_socket,
    server_config,
)

from ..conftest import postgres_conninfo, postgres_schema
from ..waiting import wait_until
from .http import TOKENS

KINDS = ["sqlite", "files", "postgres"]


@dataclass
class Store:
    """A store of one kind: where it is, and how the test writes to it."""

    kind: str
    location: str
    schema: str | None = None
    opened: list[Any] = field(default_factory=list)

    def writer(self, tenant: str = "default") -> Any:
        """A writable checkpointer of the store (closed at the test's end)."""
        if self.kind == "sqlite":
            log: Any = SqliteCheckpointer(self.location, tenant=tenant)
        elif self.kind == "files":
            log = FileCheckpointer(self.location)
        else:
            from agentlog import PostgresCheckpointer

            log = PostgresCheckpointer(
                self.location, schema=self.schema, tenant=tenant, pool_max_size=2
            )
        self.opened.append(log)
        return log

    def backdate(self, session: str, seconds: float) -> None:
        """Move ``session``'s last activity ``seconds`` into the past, as if
        it had been written then: listings order sessions active in the same
        second by id, so a test that means an order of activity puts its
        sessions in distinct seconds this way rather than waiting for a clock.
        It closes the store's writers first (take a new one after): the
        standard library's SQLite must not share a file with the C engine's
        copy in one process, whose locks the other's close would drop."""
        for log in self.opened:
            log.close()
        self.opened.clear()
        if self.kind == "files":
            path = Path(self.location) / session_file_name(session)
            st = path.stat()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)))
        elif self.kind == "sqlite":
            conn = sqlite3.connect(self.location, timeout=10)
            try:
                with conn:
                    conn.execute(
                        "UPDATE sessions SET mtime = mtime - ? WHERE name = ?", (seconds, session)
                    )
            finally:
                conn.close()
        else:
            import psycopg

            with psycopg.connect(self.location, autocommit=True) as pg:
                pg.execute(
                    f"UPDATE {self.schema}.sessions SET mtime = mtime - %s WHERE name = %s",
                    (seconds, session),
                )

    def hide_a_needle(self, needle: str, title: str, hay: list[str]) -> None:
        """Session ``needle``, titled ``title``, written first (the least recently
        active, a minute before the rest), then the ``hay`` sessions, which a
        filter for the title misses."""
        log = self.writer()
        log.set_metadata(needle, {"title": title, "tags": []}, 0)
        for session in hay:
            log.append(session, [{"type": "user", "content": "hay"}])
        self.backdate(needle, 60)

    def args(self, tenant: str = "default", allow_writes: bool = False) -> argparse.Namespace:
        """What ``agentlog serve`` parses for this store."""
        return argparse.Namespace(
            store=self.location, tenant=tenant, schema=self.schema, allow_writes=allow_writes
        )

    def source(self, tenant: str = "default", allow_writes: bool = False) -> Source:
        """The viewer's source, opened as the command opens it."""
        found: Source = viewer_source(self.args(tenant, allow_writes))
        return found


def make_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    """A new, empty store of ``kind`` (created by its writer)."""
    if kind == "postgres":
        request.getfixturevalue("postgres_server")
        store = Store(kind, postgres_conninfo(), postgres_schema(tmp_path))
    elif kind == "files":
        store = Store(kind, str(tmp_path / "files"))
    else:
        store = Store(kind, str(tmp_path / "sessions.db"))
    store.writer().close()  # creates it
    store.opened.clear()
    try:
        yield store
    finally:
        for log in store.opened:
            log.close()
        if kind == "postgres":
            import psycopg

            with psycopg.connect(postgres_conninfo(), autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {store.schema} CASCADE")


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A new store of each kind in turn."""
    yield from make_store(request.param, tmp_path, request)


@pytest.fixture
def sqlite_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A new SQLite store."""
    yield from make_store("sqlite", tmp_path, request)


#: The token :func:`guarded_client` sends.
CLIENT_TOKEN = "test-token"


def guarded_client(source: Source) -> Any:
    """A Starlette test client of ``source``'s guarded viewer, sending its token."""
    from starlette.testclient import TestClient

    return TestClient(
        guarded_app(source, token=CLIENT_TOKEN),
        base_url="http://127.0.0.1",
        headers={"Authorization": f"Bearer {CLIENT_TOKEN}"},
    )


class Viewer:
    """A viewer served by uvicorn on a free port, in a thread."""

    def __init__(
        self,
        source: Source,
        *,
        host: str = "127.0.0.1",
        token: str | None = None,
        max_streams: int = MAX_STREAMS,
        header_seconds: float = HEADER_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
    ):
        self.source = source
        self.token = access_token() if token is None else token
        # The socket and the settings `agentlog serve` uses (its limits too).
        self.sock = listening_socket(host, 0)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        TOKENS[self.port] = self.token  # the helpers of .http send it
        self.app = guarded_app(
            source, token=self.token, loopback=is_loopback(host), max_streams=max_streams
        )
        config = server_config(
            self.app,
            log_level="warning",
            timeout_graceful_shutdown=1,
            header_seconds=header_seconds,
            max_connections=max_connections,
        )
        self.server = QuietServer(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def app_state(self) -> Any:
        """The Starlette application's state (behind the guard)."""
        return self.app.app.state

    def __enter__(self) -> Viewer:
        self.thread.start()
        assert wait_until(lambda: self.server.started or not self.thread.is_alive())
        assert self.server.started
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()
        TOKENS.pop(self.port, None)

    def login(self, path: str = "/") -> str:
        """The URL of ``path`` with the token (a browser keeps it in a cookie)."""
        return f"{self.url}{path}{'&' if '?' in path else '?'}token={self.token}"


@pytest.fixture
def serve() -> Iterator[Callable[..., Viewer]]:
    """Start a viewer of a source (stopped at the test's end)."""
    started: list[Viewer] = []

    def start(source: Source, **options: Any) -> Viewer:
        viewer = Viewer(source, **options).__enter__()
        started.append(viewer)
        return viewer

    yield start
    for viewer in reversed(started):
        viewer.__exit__()
