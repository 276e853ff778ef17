"""The command line's arguments: one parser, each command's options and help."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from .. import __version__
from ..events import MAX_POSITION
from ..migrate.common import SOURCE_FORMATS
from ..stores import DEFAULT_TENANT
from .checks import cmd_check, cmd_verify
from .demo import cmd_demo
from .operations import cmd_backup, cmd_gc, cmd_info, cmd_migrate, cmd_stats
from .output import UsageError
from .serve import cmd_serve
from .sessions import cmd_fork, cmd_list, cmd_show, cmd_tail, cmd_truncate

__all__ = ["DESCRIPTION", "build_parser"]

_N = TypeVar("_N", int, float)


class _Parser(argparse.ArgumentParser):
    """argparse, with every mistake reported as one line."""

    def error(self, message: str) -> NoReturn:
        # "argument --since: must be >= 0 …" reads "--since must be >= 0 …".
        message = re.sub(r"^argument (\S+?)(?:/\S+)?: (must )", r"\1 \2", message)
        raise UsageError(f"{message} (see: {self.prog} --help)", self.prog)


def _number(convert: Callable[[str], _N], text: str, kind: str) -> _N:
    """``convert(text)``, or the usage error "must be ``kind``, not ``text``"."""
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {kind}, not {text!r}") from None


def _count(text: str) -> int:
    value = _number(int, text, "a whole number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    if value > MAX_POSITION:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_POSITION}, not {value}")
    return value


def _port(text: str) -> int:
    value = _number(int, text, "a port number")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 0 to 65535, not {value}")
    return value


def _seconds(text: str) -> float:
    value = _number(float, text, "a number of seconds")
    if not 0 < value < float("inf"):  # inf: another process's writes never shown
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, not {text}")
    return value


def _days(text: str) -> float:
    value = _number(float, text, "a number of days")
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of days >= 0, not {text}")
    return value


DESCRIPTION = (
    "Inspect and edit agentlog session logs. STORE is a SQLite file, a directory of "
    "session files (a file store) or a PostgreSQL database (postgresql://USER@HOST/DBNAME "
    "or 'host=HOST dbname=DBNAME user=USER', with "
    "--schema NAME). Read commands open the store read-only; no command creates a store, "
    "except demo and migrate (their target)."
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command (``bench`` only listed: it parses its own)."""
    parser = _Parser(prog="agentlog", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"agentlog {__version__}")
    sub = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")

    def command(name: str, text: str, func: Callable[[argparse.Namespace], None]) -> Any:
        found = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        found.set_defaults(func=func)
        return found

    def store(
        found: argparse.ArgumentParser,
        kinds: str = "a SQLite file, a file store or a postgresql:// URL",
        schema: bool = True,
    ) -> None:
        found.add_argument("store", metavar="STORE", help=kinds)
        if not schema:  # a SQLite-only command offers no PostgreSQL option
            found.set_defaults(schema=None)
            return
        found.add_argument(
            "--schema",
            metavar="NAME",
            help="the PostgreSQL schema the store lives in (default: 'agentlog')",
        )

    def session(found: argparse.ArgumentParser) -> None:
        found.add_argument("session", metavar="SESSION", help="the session id")

    def tenant(found: argparse.ArgumentParser | Any) -> None:
        found.add_argument(
            "--tenant",
            default=DEFAULT_TENANT,
            metavar="NAME",
            help=f"the tenant whose sessions to use (default: {DEFAULT_TENANT!r}; "
            "SQLite and PostgreSQL)",
        )

    demo = command("demo", "record, resume, conflict, fork and fold a session", cmd_demo)
    demo.add_argument(
        "--db", metavar="FILE", help="the SQLite file to use and keep (default: a temporary one)"
    )
    demo.add_argument(
        "--force", action="store_true", help="reset the demo's sessions if FILE already holds them"
    )

    listing = command("list", "list sessions, most recently active first", cmd_list)
    store(listing)
    which = listing.add_mutually_exclusive_group()
    tenant(which)
    which.add_argument(
        "--all-tenants", action="store_true", help="every tenant's sessions, with a tenant column"
    )
    listing.add_argument("--json", action="store_true", help="one JSON object per session")

    def reader(name: str, summary: str, func: Callable[[argparse.Namespace], None]) -> Any:
        # What both commands that print one session's events take.
        found = command(name, summary, func)
        store(found)
        session(found)
        tenant(found)
        found.add_argument("--since", type=_count, default=0, metavar="N", help="start after seq N")
        return found

    show = reader("show", "show a session as a folded transcript", cmd_show)
    form = show.add_mutually_exclusive_group()
    form.add_argument("--raw", action="store_true", help="print the events, not the transcript")
    form.add_argument("--json", action="store_true", help="print the events as JSON lines")

    tail = reader("tail", "print a session's events as they are appended", cmd_tail)
    tail.add_argument(
        "--interval",
        type=_seconds,
        default=0.05,
        metavar="S",
        help="seconds between looks for another process's writes (0.05)",
    )
    tail.add_argument("--once", action="store_true", help="print what is there and stop")
    tail.add_argument("--json", action="store_true", help="print the events as JSON lines")

    fork = command("fork", "copy events 1..AT of a session into a new session", cmd_fork)
    store(fork)
    session(fork)
    fork.add_argument("at", metavar="AT", type=_count, help="the last seq to copy")
    fork.add_argument("new_session", metavar="NEW", help="the new session's id")
    tenant(fork)

    truncate = command("truncate", "drop every event of a session after seq TO", cmd_truncate)
    store(truncate)
    session(truncate)
    truncate.add_argument("to", metavar="TO", type=_count, help="the seq to keep up to")
    tenant(truncate)

    check = command(
        "check",
        "check a store: SQLite's quick_check on a database file, or that every session "
        "file of a file store reads back",
        cmd_check,
    )
    store(check)
    check.add_argument(
        "--deep",
        action="store_true",
        help="also read every event of every session and list each damaged one",
    )
    check.add_argument("--json", action="store_true", help="print the result as JSON")

    verify = command(
        "verify",
        "recompute the hash chain of sessions of a SQLite file and print each head digest",
        cmd_verify,
    )
    store(verify, "a SQLite file", schema=False)
    verify.add_argument(
        "sessions", metavar="SESSION", nargs="*", help="the sessions (default: every one)"
    )
    verify.add_argument(
        "--expect",
        metavar="DIGEST",
        help="the head digest kept from before: fail unless the session still has it",
    )
    verify.add_argument("--json", action="store_true", help="one JSON object per session")
    tenant(verify)

    info = command("info", "which engine and SQLite run", cmd_info)
    info.add_argument("--json", action="store_true", help="print every detail as JSON")

    migrate = command(
        "migrate",
        "copy sessions into SQLite or PostgreSQL, backup first",
        cmd_migrate,
    )
    migrate.add_argument(
        "source",
        metavar="SRC",
        help="a JSON v1 sessions directory, a file store, a SQLite file (its --tenant),"
        " a framework's store (see --from), or the postgresql:// URL of a LangGraph"
        " PostgresSaver",
    )
    migrate.add_argument(
        "target",
        metavar="DST",
        help="the SQLite file, or PostgreSQL URL (postgresql://…), to write",
    )
    migrate.add_argument(
        "--from",
        dest="source_kind",
        choices=list(SOURCE_FORMATS),
        help="the kind of source (default: detected from what SRC holds)",
    )
    migrate.add_argument("--schema", help="the PostgreSQL schema to write into (default: agentlog)")
    migrate.add_argument("--dry-run", action="store_true", help="plan and report; write nothing")
    tenant(migrate)
    migrate.set_defaults(tenant=None)  # the source's kind decides (langgraph for LangGraph)
    migrate.add_argument(
        "--allow-pickle",
        action="store_true",
        help="carry a LangGraph store's pickled values (unpickling can run any code)",
    )
    migrate.add_argument("--source-id", help="the source's name in the ledger (default: its path)")
    migrate.add_argument("--backup", help="where to put the backup (default: beside the target)")
    stats = command(
        "stats", "sizes, counts and the largest sessions of a SQLite file or PostgreSQL", cmd_stats
    )
    store(stats, "a SQLite file or a postgresql:// URL")
    stats.add_argument("--json", action="store_true", help="print every figure as JSON")

    backup = command(
        "backup",
        "copy a SQLite file to a new file while writers go on, then verify the copy",
        cmd_backup,
    )
    store(backup, "a SQLite file (PostgreSQL: use pg_dump)")
    backup.add_argument("dest", metavar="DEST", help="the new file to write")

    gc = command(
        "gc",
        "retention and space: delete a tenant's idle sessions, prune the events its "
        "snapshots cover, then give free space back to the file system",
        cmd_gc,
    )
    store(gc, "a SQLite file or a postgresql:// URL")
    gc.add_argument(
        "--idle-days",
        type=_days,
        metavar="N",
        help="delete sessions not changed for more than N days",
    )
    gc.add_argument(
        "--keep-after-snapshot",
        type=_count,
        metavar="N",
        help="delete the events before each session's newest snapshot but the last N",
    )
    tenant(gc)
    gc.add_argument("--dry-run", action="store_true", help="list what would go; delete nothing")

    serve = command(
        "serve",
        "show the store's sessions in a web browser, live (needs agentlog[serve])",
        cmd_serve,
    )
    store(serve)
    tenant(serve)
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default: 127.0.0.1; any other needs the printed token)",
    )
    serve.add_argument(
        "--port", type=_port, default=8765, help="the port to listen on (default: 8765; 0: any)"
    )
    serve.add_argument("--open", action="store_true", help="open the viewer in a browser")
    serve.add_argument(
        "--allow-writes",
        action="store_true",
        help="offer fork and truncate in the viewer (opens the store for writing)",
    )
    serve.add_argument(
        "--upgrade",
        action="store_true",
        help="with --allow-writes: upgrade a store of an older schema (else refused)",
    )
    serve.add_argument(
        "--metrics",
        action="store_true",
        help="serve agentlog's metrics at /metrics for Prometheus (needs agentlog[prometheus])",
    )

    # Listed for --help; its options are the benchmark's own (see main()).
    sub.add_parser(
        "bench", help="run the benchmark (from a checkout); options as python -m benchmarks"
    )
    return parser
