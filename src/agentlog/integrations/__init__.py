"""agentlog inside the agent frameworks: one module per framework.

Each module imports its framework, installed with the matching extra:
``pip install "agentlog[openai-agents]"`` for
:mod:`agentlog.integrations.openai_agents`, ``pip install
"agentlog[langgraph]"`` for :mod:`agentlog.integrations.langgraph`,
``pip install "agentlog[google-adk]"`` for
:mod:`agentlog.integrations.google_adk`.
"""

from __future__ import annotations

import os
from typing import Any

from agentlog.aio import AsyncSqliteCheckpointer

__all__ = ["open_or_use"]


def open_or_use(
    store: object, options: dict[str, Any], kind: type[Any]
) -> tuple[Any, AsyncSqliteCheckpointer | None]:
    """An adapter's store: ``(log, owned)``.

    A path opens an :class:`~agentlog.aio.AsyncSqliteCheckpointer` there with
    ``options``, which the adapter owns (and closes); an open ``kind`` (a
    runtime-checkable protocol such as :class:`~agentlog.aio.AsyncCheckpointer`)
    is used as it is (its owner closes it, and it takes no options); anything
    else is a ``TypeError``.
    """
    if isinstance(store, (str, os.PathLike)):
        owned = AsyncSqliteCheckpointer(store, **options)
        return owned, owned
    if isinstance(store, kind):
        if options:
            raise TypeError("options are for a path; an open checkpointer takes none")
        return store, None
    raise TypeError(
        f"store must be a path or an agentlog {kind.__name__}, not {type(store).__name__}"
    )
