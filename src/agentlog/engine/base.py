"""What both SQLite engines share, by role: :mod:`.errors` (result codes and
refusals), :mod:`.connections` (opening, the schema guard, the reader pool,
transactions, the WAL's bound), :mod:`.log_ops` (the log's operations) and
:mod:`.maintenance` (an operator's); :class:`EngineBase` is all of them.

An engine is the narrow, bytes-level layer under the SQLite backend and the
stores (:class:`~agentlog.engine.interface.Engine`): it owns the connections,
allocates seq inside the write transaction, writes a whole batch at once and
scans forward a page at a time. Everything but the hot paths is written once
here, on one driver primitive per twin, ``_connect``, which returns a
connection with ``rows``, ``in_transaction`` and ``close``.
"""

from __future__ import annotations

from typing import ClassVar

from .connections import ConnectionT
from .maintenance import Maintenance

__all__ = ["EngineBase"]


class EngineBase(Maintenance[ConnectionT]):
    """The engine interface, less the driver and the hot paths.

    ``ConnectionT`` is the twin's connection class.
    """

    name: ClassVar[str] = "base"
