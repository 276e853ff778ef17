"""``agentlog serve --open`` keeps the token off the browser's command line
(finding 11 of issue 40): the browser is given a private local file that
sends it on, and the file is gone once the viewer stops."""

from __future__ import annotations

import re
import socket
import webbrowser
from pathlib import Path
from typing import Any

import pytest

from agentlog.serve import run
from agentlog.serve.server import QuietServer

from .conftest import Store


def test_open_gives_the_browser_a_private_file_not_the_token(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[tuple[str, str, int]] = []

    def browser(url: str, *args: Any, **kwargs: Any) -> bool:
        path = Path(url.removeprefix("file://"))
        if not url.startswith("file://") or not path.is_file():
            opened.append((url, "", 0))
        else:
            opened.append((url, path.read_text(), path.stat().st_mode & 0o777))
        return True

    def serve(self: QuietServer, sockets: list[socket.socket] | None = None) -> None:
        for sock in sockets or []:  # stopped at once: the browser has been opened
            sock.close()

    monkeypatch.setattr(webbrowser, "open", browser)
    monkeypatch.setattr(QuietServer, "run", serve)
    said: list[str] = []
    source = sqlite_store.source()
    try:
        run(source, port=0, open_browser=True, say=said.append)
    finally:
        source.close()
    found = re.search(r"\?token=([\w-]+) ", said[0])
    assert found, said
    token = found[1]
    [(url, page, mode)] = opened
    assert url.startswith("file://") and token not in url
    assert f"?token={token}" in page and mode == 0o600
    assert not Path(url.removeprefix("file://")).exists()
