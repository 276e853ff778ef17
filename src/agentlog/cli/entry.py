"""The entry point of the ``agentlog`` command (and of ``python -m agentlog``)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from ..errors import AgentlogError
from ..locations import scrub, shown
from .demo import demo_resume
from .operations import bench
from .output import UsageError, fail
from .parser import build_parser

__all__ = ["EXIT_BROKEN_PIPE", "main"]


#: The exit status of a command whose output was cut short by a closed pipe
#: (``agentlog show … | head``), as for a process that SIGPIPE ended.
EXIT_BROKEN_PIPE = 128 + 13


def _run(argv: list[str]) -> None:
    # The benchmark bypasses the parser: it has options of its own.
    if argv[:1] == ["bench"]:
        bench(argv[1:])
        return
    prog, store, source, named = "agentlog", None, None, True
    try:
        if argv[:1] == ["_demo-resume"] and len(argv) == 3:
            # The demo's second process: internal, so not a listed command.
            prog, store = "agentlog demo", argv[1]
            demo_resume(argv[1], argv[2])
            return
        args, extra = build_parser().parse_known_args(argv)
        if extra:  # named with the subcommand they were given to
            prog = f"agentlog {args.command}"
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see: {prog} --help)")
        # The store a message may name (migrate's is its target): its password hidden.
        store = getattr(args, "store", None) or getattr(args, "target", None)
        # Migrate's source may be a PostgreSQL URL too, quoted by libpq's errors.
        source = getattr(args, "source", None)
        named = args.command != "migrate"  # its errors name the source or the target
        prog = f"agentlog {args.command}"
        args.func(args)
    except UsageError as exc:
        fail(exc.prog or prog, scrub(str(exc), store, source))
    except (AgentlogError, ValueError, OSError) as exc:  # typed errors, bad arguments, I/O
        if isinstance(exc, BrokenPipeError):
            raise
        message = scrub(str(exc) or type(exc).__name__, store, source)
        where = shown(store) if store and named else None
        if where and where not in message and not isinstance(exc, ValueError):
            message = f"{where}: {message}"  # say which store, when the error does not
        fail(prog, message)


def _quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null, so the interpreter's own
    flush at exit finds nothing to complain about."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (a test's capture): nothing will be flushed to a pipe


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``agentlog`` command."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    # psycopg's pool logs each failed connection attempt (several lines each)
    # while it retries; what the command makes of the failure is its one line.
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    # The same for the engine's operator logs (a refused file, a retry): they
    # are for a host's logging; unconfigured, Python would print them beside
    # the error line the command prints for the same event.
    for name in ("agentlog.engine", "agentlog.file", "agentlog.postgres"):
        logging.getLogger(name).addHandler(logging.NullHandler())
    try:
        _run(arguments)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`agentlog show … | head`): stop quietly.
        _quiet_stdout()
        raise SystemExit(EXIT_BROKEN_PIPE) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
