"""The four stores and the session log's Checkpointer face, opened together.

:class:`InMemoryStorage`, :class:`SqliteStorage` and :class:`PostgresStorage`
(imported on first use: it needs psycopg) each hold the four stores of
:mod:`agentlog.stores` on one database and hand out, through
``checkpointer()``, the log's face of the same sessions. They sit above both
the log and the stores, which know nothing of each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names
from .memory import InMemoryStorage
from .sqlite import SqliteStorage

if TYPE_CHECKING:
    from .postgres import PostgresStorage

__all__ = ["InMemoryStorage", "PostgresStorage", "SqliteStorage"]

# The PostgreSQL storage needs psycopg: it is imported when first named.
__getattr__ = lazy_names(__name__, {"PostgresStorage": ".postgres"})
