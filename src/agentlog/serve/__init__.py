"""``agentlog serve``: a local web viewer of a store, with a live tail.

It reads through the public API only: the command line opens the store
(read-only unless ``--allow-writes``) and hands a :class:`Source` to
:func:`create_app`, a Starlette application served by uvicorn. Needs
``agentlog[serve]``.
"""

from __future__ import annotations

import os
import secrets
import signal
import webbrowser
from collections.abc import Callable
from types import FrameType

from .app import Stopping, create_app, guarded_app
from .security import is_loopback
from .source import Source

__all__ = [
    "Source",
    "access_token",
    "create_app",
    "guarded_app",
    "is_loopback",
    "login_file",
    "run",
]


def access_token() -> str:
    """A fresh random access token: every bind requires one, a loopback one
    too (any local user could otherwise read every transcript)."""
    return secrets.token_urlsafe(24)


def login_file(url: str, directory: str | None = None) -> str:
    """A page, readable by this user only, that sends a browser on to ``url``
    (which carries the token): the browser is given this file's path, so
    the token is not on its command line for other local users to see."""
    import html
    import os
    import tempfile

    fd, path = tempfile.mkstemp(prefix="agentlog-serve-", suffix=".html", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as out:  # mkstemp's mode is 0600
        link = html.escape(url, quote=True)
        out.write(
            f'<!doctype html><meta http-equiv="refresh" content="0;url={link}">'
            f'<title>agentlog serve</title><a href="{link}">open the viewer</a>\n'
        )
    return path


def run(
    source: Source,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    open_browser: bool = False,
    say: Callable[[str], None] = print,
) -> None:
    """Serve ``source`` at ``host:port`` until interrupted."""
    from .server import QuietServer, listening_socket, server_config

    token = access_token()
    shown = f"[{host}]" if ":" in host else host
    stopping = Stopping()
    app = guarded_app(source, token=token, loopback=is_loopback(host), stopping=stopping)

    class Server(QuietServer):
        """uvicorn's server, whose stop first ends the live streams (they
        never end on their own), so it need not cancel them."""

        interrupted = False

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            stopping.set()
            self.interrupted = self.interrupted or sig == signal.SIGINT
            super().handle_exit(sig, frame)

    # The streams end at once on a stop; anything slower gets two seconds.
    config = server_config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=2
    )
    server = Server(config)
    # Bound here, so that a port in use is an OSError for the caller to
    # report (uvicorn's own bind would log it and exit).
    sock = listening_socket(host, port)
    port = sock.getsockname()[1]
    url = f"http://{shown}:{port}/?token={token}"
    say(f"agentlog serve: {source.location} at {url} (Ctrl-C stops)")
    login = None
    if open_browser:
        login = login_file(url)
        webbrowser.open("file://" + login)
    # uvicorn raises a SIGINT again once stopped, for the handler it found;
    # where that was "ignore" (`nohup ... &`) the stop would look like an end
    # of its own, so it is an interruption (exit 130) here. A caller's own
    # handler is left to decide.
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    try:
        server.run(sockets=[sock])
    finally:
        if login is not None:
            os.unlink(login)
    if server.interrupted and ignored:
        raise KeyboardInterrupt
