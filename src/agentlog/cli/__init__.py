"""The ``agentlog`` command line: a demo, and the everyday operations on a store.

A STORE argument is a SQLite file, a directory of JSONL session files (a
file store), or a PostgreSQL database: a URL (``postgresql://…`` or
``postgres://…``) or a libpq ``host=… dbname=…`` string, with ``--schema``
naming the store's schema. Commands that only read open
the store read-only and never create or change anything; the commands that
write (``fork``, ``truncate``, ``gc``) open an existing store only. Every
mistake is one line on standard error and a non-zero exit status; a
PostgreSQL password given on the command line is never printed.

The package: :mod:`.entry` (``main``, the entry point), :mod:`.parser` (the
arguments), the commands by group (:mod:`.demo`, :mod:`.sessions`,
:mod:`.checks`, :mod:`.operations`), :mod:`.opening` (opening the store a
command names) and :mod:`.output` (what is printed, and how a mistake is).
"""

from __future__ import annotations

from .demo import DEMO_SESSIONS as DEMO_SESSIONS
from .demo import SESSION as SESSION
from .entry import EXIT_BROKEN_PIPE as EXIT_BROKEN_PIPE
from .entry import main
from .opening import open_store as open_store
from .output import UsageError as UsageError
from .parser import DESCRIPTION as DESCRIPTION

__all__ = ["main"]
