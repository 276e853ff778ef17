"""``agentlog serve``: a local web viewer of a store, with a live tail.

It reads through the public API only: the command line opens the store
(read-only unless ``--allow-writes``) and hands a :class:`Source` to
:func:`create_app`, a Starlette application served by uvicorn. Needs
``agentlog[serve]``.
"""

from __future__ import annotations

import secrets
import signal
import webbrowser
from collections.abc import Callable
from types import FrameType

from .app import Stopping, create_app, guarded_app
from .security import is_loopback
from .source import Source

__all__ = ["Source", "access_token", "create_app", "guarded_app", "is_loopback", "run"]


def access_token(host: str) -> str | None:
    """The token a bind to ``host`` requires: none on loopback (the Host
    header is checked instead), a fresh random one otherwise."""
    return None if is_loopback(host) else secrets.token_urlsafe(24)


def run(
    source: Source,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    open_browser: bool = False,
    say: Callable[[str], None] = print,
) -> None:
    """Serve ``source`` at ``host:port`` until interrupted."""
    import socket

    import uvicorn

    token = access_token(host)
    shown = f"[{host}]" if ":" in host else host
    stopping = Stopping()
    app = guarded_app(source, token=token, stopping=stopping)

    class Server(uvicorn.Server):
        """uvicorn's server, whose stop first ends the live streams (they
        never end on their own), so it need not cancel them."""

        interrupted = False

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            stopping.set()
            self.interrupted = self.interrupted or sig == signal.SIGINT
            super().handle_exit(sig, frame)

    # The streams end at once on a stop; anything slower gets two seconds.
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    server = Server(config)
    # Bound here, so that a port in use is an OSError for the caller to
    # report (uvicorn's own bind would log it and exit).
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # listening before the address is printed: no refused first look
    except OSError:
        sock.close()
        raise
    port = sock.getsockname()[1]
    url = f"http://{shown}:{port}/" + ("" if token is None else f"?token={token}")
    say(f"agentlog serve: {source.location} at {url} (Ctrl-C stops)")
    if open_browser:
        webbrowser.open(url)
    # uvicorn raises a SIGINT again once stopped, for the handler it found;
    # where that was "ignore" (`nohup ... &`) the stop would look like an end
    # of its own, so it is an interruption (exit 130) here. A caller's own
    # handler is left to decide.
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    server.run(sockets=[sock])
    if server.interrupted and ignored:
        raise KeyboardInterrupt
