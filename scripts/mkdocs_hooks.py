"""MkDocs hooks for the manual (mkdocs.yml names this file under ``hooks``).

agentlog's docstrings mark names with Sphinx roles (``:class:`Checkpointer```);
the API reference renders docstrings as Markdown, where a role would show as
text. This hook drops the role and keeps the name as code, as Sphinx shows it
(``~a.b.C`` as ``C``).
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:class|meth|func|attr|exc|data|mod|obj|const):<code>(~[\w.]*\.)?")


def on_page_content(html: str, **_: Any) -> str:
    """Drop the Sphinx roles from a rendered page."""
    return ROLE.sub("<code>", html)
