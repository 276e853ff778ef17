"""The integrity commands: check (every kind of store) and verify (SQLite's hash chains)."""

from __future__ import annotations

import argparse
import os
import re
import sys

from ..locations import is_postgres, shown
from ..log import SqliteCheckpointer
from ..terminal import progress_bar
from .opening import Checkable, open_database, open_store, require_session
from .output import UsageError, print_json, safe

__all__ = ["cmd_check", "cmd_verify"]


def cmd_check(args: argparse.Namespace) -> None:
    """``agentlog check STORE``: the store's integrity check (``--deep``: every event)."""
    with open_store(args.store, schema=args.schema) as log:
        assert isinstance(log, Checkable)
        bar = progress_bar(sys.stderr, "sessions checked") if sys.stderr.isatty() else None
        ok, detail = log.check_integrity(deep=args.deep, progress=bar)
    if args.json:
        kind = "file" if os.path.isdir(args.store) else "sqlite"
        if is_postgres(args.store):
            kind = "postgresql"
        print_json(
            {
                "store": shown(args.store),
                "kind": kind,
                "deep": args.deep,
                "ok": ok,
                "detail": detail,
            }
        )
    else:
        print("\n".join(safe(line) for line in detail.split("\n")))
    if not ok:
        raise SystemExit(1)


_DIGEST = re.compile(r"[0-9a-f]{64}")


def cmd_verify(args: argparse.Namespace) -> None:
    """``agentlog verify FILE [SESSION…]``: each session's hash chain and head digest."""
    expect = None
    if args.expect is not None:
        expect = args.expect.strip().lower()
        if not _DIGEST.fullmatch(expect):
            raise UsageError(f"--expect takes a sha256 digest (64 hex digits), not {args.expect!r}")
        if len(args.sessions) != 1:
            raise UsageError("--expect needs exactly one SESSION")
    failed = False
    with open_database(args, write=False) as log:
        if not isinstance(log, SqliteCheckpointer):
            raise UsageError("verify works on a SQLite file: only SQLite keeps hash chains")
        chained = log.hash_chain
        if not chained and expect is None:
            raise UsageError(
                f"{shown(args.store)} keeps no hash chain, so there are no links to verify"
                " (a file keeps one once opened with hash_chain=True; --expect DIGEST"
                " still compares a session's recomputed head digest)"
            )
        names = args.sessions or sorted(info.id for info in log.list())
        reports = []
        for name in names:
            require_session(log, args, name)
            report = log.verify(name)
            # Without a chain the stored links are all absent: only the digest speaks.
            problem = report.problem if chained else None
            if problem is None and expect is not None and report.digest != expect:
                problem = (
                    f"head digest is not the expected {expect} (cut, or changed and re-chained)"
                )
            failed = failed or problem is not None
            reports.append((report, problem))
    for report, problem in reports:
        if args.json:
            print_json(
                {
                    "session": report.session_id,
                    "head": report.head,
                    "digest": report.digest,
                    "ok": problem is None,
                    "problem": problem,
                }
            )
        else:
            verdict = "ok" if problem is None else f"FAILED: {problem}"
            print(safe(f"{report.session_id}  head {report.head}  {report.digest}  {verdict}"))
    if failed:
        raise SystemExit(1)
