"""A throwaway PostgreSQL cluster for the tests (and the benchmark).

:func:`find_bindir` looks for the server binaries (``initdb``, ``pg_ctl``):
``AGENTLOG_PG_BINDIR``, then ``pg_config --bindir``, then the binaries on
``PATH``, then the usual Debian layout (the newest version installed there).
:class:`PostgresServer` runs ``initdb`` into a temporary directory, starts
the server on a free loopback port with its socket in that directory, and
creates a database; :meth:`PostgresServer.stop` stops it (``pg_ctl stop -m
fast``) and removes the directory.

The server refuses to run as root, so when this process is root the
server's commands run as the ``postgres`` user (``runuser``, else ``su``)
and the directory is handed to it. The cluster is for tests only: it runs
with ``fsync=off`` (a crash of the machine may lose it, which a throwaway
cluster does not mind) and trusts every local connection.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["PostgresServer", "find_bindir", "missing_reason"]

SERVER_USER = "postgres"


def _has_server(bindir: str) -> bool:
    return all(os.access(os.path.join(bindir, tool), os.X_OK) for tool in ("initdb", "pg_ctl"))


def find_bindir() -> str | None:
    """The directory that holds ``initdb`` and ``pg_ctl``, or None."""
    candidates: list[str] = []
    if os.environ.get("AGENTLOG_PG_BINDIR"):
        candidates.append(os.environ["AGENTLOG_PG_BINDIR"])
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(out.stdout.strip())
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(os.path.dirname(initdb))

    def version(path: str) -> float:
        try:
            return float(Path(path).parent.name)
        except ValueError:
            return 0.0

    candidates.extend(sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True))
    for candidate in candidates:
        if candidate and _has_server(candidate):
            return candidate
    return None


def missing_reason() -> str | None:
    """Why no server can be started here (None when one can)."""
    if find_bindir() is None:
        return (
            "no PostgreSQL server binaries (initdb, pg_ctl) found: install the server, "
            "or set AGENTLOG_PG_BINDIR to the directory that holds them"
        )
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"running as root and there is no {SERVER_USER!r} user to run the server"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """One throwaway cluster: :meth:`start`, use :attr:`conninfo`, :meth:`stop`."""

    def __init__(
        self,
        dbname: str = "agentlog_test",
        max_connections: int = 300,
        *,
        synchronous_commit: str = "off",
    ) -> None:
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError(missing_reason())
        self.bindir = bindir
        self.dbname = dbname
        self.max_connections = max_connections
        # "on" for a test that crashes the server: an acknowledged commit must
        # survive it ("off" may lose the last ones, and is faster).
        self.synchronous_commit = synchronous_commit
        self.root = Path(tempfile.mkdtemp(prefix="agentlog-pg-"))
        self.data = self.root / "data"
        self.port = 0
        self.started = False

    # -- running the server's commands as a user it accepts -------------------

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        command = [os.path.join(self.bindir, args[0]), *args[1:]]
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            if runuser:
                command = [runuser, "-u", SERVER_USER, "--", *command]
            else:
                command = ["su", SERVER_USER, "-s", "/bin/sh", "-c", shlex.join(command)]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, cwd=self.root
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{args[0]} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )
        return result

    def start(self) -> PostgresServer:
        """initdb, start on a free loopback port, create the database."""
        if os.geteuid() == 0:
            import pwd

            user = pwd.getpwnam(SERVER_USER)
            os.chown(self.root, user.pw_uid, user.pw_gid)
        os.chmod(self.root, 0o755)
        self._run(
            "initdb", "-D", str(self.data), "-A", "trust", "-U", SERVER_USER,
            "-E", "UTF8", "--no-locale", "--no-sync",
        )  # fmt: skip
        for _attempt in range(5):
            self.port = _free_port()
            try:
                self.start_server()
            except RuntimeError:
                if _attempt == 4:
                    raise RuntimeError(self._log_tail()) from None
                continue
            break
        self._run(
            "createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", SERVER_USER, self.dbname
        )
        return self

    def start_server(self) -> None:
        """Start the server of the cluster (again) on :attr:`port`."""
        options = " ".join(
            [
                f"-k {self.root}",
                "-c listen_addresses=127.0.0.1",
                "-c fsync=off",  # a throwaway cluster: speed over surviving an OS crash
                f"-c synchronous_commit={self.synchronous_commit}",
                "-c full_page_writes=off",
                f"-c max_connections={self.max_connections}",
                "-c shared_buffers=64MB",
            ]
        )
        self._run(
            "pg_ctl", "start", "-D", str(self.data), "-w", "-t", "60",
            "-l", str(self.root / "server.log"), "-o", f"{options} -p {self.port}",
        )  # fmt: skip
        self.started = True

    def stop_server(self) -> None:
        """Stop the server (fast shutdown), keeping the cluster to start again."""
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w")
        self.started = False

    def crash(self) -> None:
        """Stop the server at once (``-m immediate``: no checkpoint, every
        connection cut, crash recovery on the next start)."""
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w")
        self.started = False

    def _log_tail(self) -> str:
        try:
            return (self.root / "server.log").read_text()[-4000:]
        except OSError:
            return "(no server log)"

    @property
    def conninfo(self) -> str:
        """The libpq connection string of the test database (TCP on loopback)."""
        return f"host=127.0.0.1 port={self.port} dbname={self.dbname} user={SERVER_USER}"

    def conninfo_for(self, dbname: str) -> str:
        """The connection string of another database on this server."""
        return f"host=127.0.0.1 port={self.port} dbname={dbname} user={SERVER_USER}"

    def create_database(self, dbname: str) -> str:
        """Create ``dbname`` and return its connection string."""
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", SERVER_USER, dbname)
        return self.conninfo_for(dbname)

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory."""
        try:
            if self.started:
                self.stop_server()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_ready(conninfo: str, timeout: float = 30.0) -> None:
    """Block until the server accepts connections (for a server started elsewhere)."""
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(conninfo, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
