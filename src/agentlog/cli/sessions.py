"""The everyday commands on a store's sessions: list, show, tail, fork, truncate."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator

from ..errors import EventsPrunedError
from ..events import SessionInfo
from ..fold import fold_events
from ..locations import shown
from ..terminal import screen_for
from .opening import Tenanted, open_log, refuse_empty_tenant, require_session
from .output import UsageError, event_json, print_event, print_json, print_transcript, safe

__all__ = ["cmd_fork", "cmd_list", "cmd_show", "cmd_tail", "cmd_truncate"]


def cmd_list(args: argparse.Namespace) -> None:
    """``agentlog list STORE``: sessions, most recently active first."""
    with open_log(args) as log:
        rows: list[tuple[str, SessionInfo]]
        if args.all_tenants and isinstance(log, Tenanted):
            rows = log.list_all_tenants()
        else:
            rows = [(args.tenant, info) for info in log.list()]
            if not rows and isinstance(log, Tenanted):
                refuse_empty_tenant(log, args)
    if args.json:
        for tenant, info in rows:
            print_json({"tenant": tenant, "id": info.id, "head": info.head, "mtime": info.mtime})
        return
    headers = ["tenant"] if args.all_tenants else []
    table = []
    for tenant, info in rows:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.mtime))
        columns = [tenant] if args.all_tenants else []
        table.append([*columns, info.id, str(info.head), stamp])
    screen_for(sys.stdout).table([*headers, "session", "head", "last active"], table)


@contextlib.contextmanager
def _pruned_hint(store: str) -> Iterator[None]:
    """Say how to read what retention kept when a read starts before it."""
    try:
        yield
    except EventsPrunedError as exc:
        raise UsageError(
            f"{shown(store)}: {exc}; add --since {exc.first_retained - 1} to read what is kept"
        ) from None


def cmd_show(args: argparse.Namespace) -> None:
    """``agentlog show STORE SESSION``: a folded transcript, the events, or JSON."""
    with open_log(args) as log, _pruned_hint(args.store):
        require_session(log, args)
        events = log.read(args.session, since_seq=args.since)
        if args.raw:
            screen_for(sys.stdout).events(events)
        elif args.json:
            for event in events:
                print_json(event_json(event))
        else:
            print_transcript(fold_events(events), indent="")


def cmd_tail(args: argparse.Namespace) -> None:
    """``agentlog tail STORE SESSION``: the events, then each one as it is appended."""
    with open_log(args) as log, _pruned_hint(args.store):
        require_session(log, args)
        if args.once:
            events = log.read(args.session, since_seq=args.since)
        else:
            # Each event as its writer commits it; a truncate below what was
            # printed ends the tail with an error (SessionTruncatedError).
            events = log.follow(args.session, args.since, poll_interval=args.interval)
        for event in events:
            if args.json:
                print_json(event_json(event))
            else:
                print_event(event)
            if not args.once:
                sys.stdout.flush()  # the next one may be a while


def cmd_fork(args: argparse.Namespace) -> None:
    """``agentlog fork STORE SESSION AT NEW``: copy events 1..AT into a new session."""
    with open_log(args, write=True) as log:
        require_session(log, args)
        head = log.fork(args.session, args.at, args.new_session)
    print(safe(f"forked {args.session} at {args.at} into {args.new_session} (head {head})"))


def cmd_truncate(args: argparse.Namespace) -> None:
    """``agentlog truncate STORE SESSION TO``: drop every event after seq TO."""
    with open_log(args, write=True) as log:
        head = require_session(log, args)
        new_head = log.truncate(args.session, args.to)
    if args.to >= head:
        print(safe(f"{args.session}: head {head} (nothing after {args.to} to drop)"))
    else:
        print(safe(f"{args.session}: head {new_head}"))
