"""Serving the app with uvicorn: in the foreground (``veritrain serve``, ``veritrain
demo``) or in a background thread on a free port (tests, benchmarks, notebooks)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import uvicorn

from web.app import create_app
from web.settings import WebSettings

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
START_TIMEOUT_S = 30.0


def serve(
    settings: WebSettings,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    log_level: str = "info",
    workers: int = 1,
    factory: str | None = None,
) -> None:
    """Serve the app until interrupted (Ctrl+C). ``X-Forwarded-*`` headers are trusted from
    the local host only (uvicorn's default), so a reverse proxy there sets the URLs the page
    shows in its "verify this run yourself" commands.

    With ``workers > 1`` uvicorn starts that many processes on one socket; each builds its
    app by calling ``factory`` ("module:function", no arguments), which must yield the app for
    the same settings (they come from the environment, which the workers inherit)."""
    if workers > 1:
        if factory is None:
            raise ValueError("serving with several workers needs an app factory importable by name")
        uvicorn.run(
            factory,
            factory=True,
            host=host,
            port=port,
            log_level=log_level,
            proxy_headers=True,
            workers=workers,
        )
        # The supervisor returns only once a signal has stopped it (it exits on errors); report the
        # interrupt as the single-process server does, so Ctrl+C ends with status 130 either way.
        raise KeyboardInterrupt

    config = uvicorn.Config(
        create_app(settings), host=host, port=port, log_level=log_level, proxy_headers=True
    )
    server = _SignalledServer(config)
    server.run()
    if server.signalled:
        # uvicorn re-raises the signal after its graceful shutdown, from inside asyncio.run,
        # which has a SIGINT handler of its own; once in a full `make test` that re-raise was
        # lost and Ctrl+C ended with status 0. Report the interrupt ourselves: always 130.
        raise KeyboardInterrupt


class _SignalledServer(uvicorn.Server):
    """A uvicorn server that remembers whether a signal (SIGINT, SIGTERM) stopped it."""

    signalled = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.signalled = True
        super().handle_exit(sig, frame)


def base_url(host: str, port: int) -> str:
    """The URL a person types to reach a server bound to ``host:port``."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    if ":" in shown:  # an IPv6 literal
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def bound_socket(host: str = DEFAULT_HOST, port: int = 0) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: a free port) for uvicorn's ``sockets=``.

    The protocol is named (IPPROTO_TCP), not left 0: asyncio turns Nagle's algorithm off only
    on connections whose socket says TCP, and a connection accepted from a listening socket
    made with protocol 0 says 0. With Nagle on, every small answer waited out the client's
    delayed ACK: ~50 ms a request instead of ~10 (measured: the API on loopback, 2 cores)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


@contextmanager
def serve_in_thread(
    settings: WebSettings, *, host: str = DEFAULT_HOST, port: int = 0
) -> Iterator[str]:
    """Serve the app from a background thread for the duration of the ``with`` block and
    yield its base URL (``http://127.0.0.1:<port>``); ``port=0`` picks a free port. The
    server is stopped (open connections finished) when the block exits."""
    sock = bound_socket(host, port)
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(settings), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    # uvicorn installs signal handlers only on the main thread; a background server must not.
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="veritrain-web", daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the web app did not start on {host}:{bound_port} "
                    f"within {START_TIMEOUT_S:.0f} s"
                )
            time.sleep(0.02)
        yield base_url(host, bound_port)
    finally:
        server.should_exit = True
        thread.join(timeout=START_TIMEOUT_S)
        sock.close()
