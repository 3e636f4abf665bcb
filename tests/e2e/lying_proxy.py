"""A server that lies: it forwards every request to a real veritrain server and rewrites the
JSON of the answers a test chooses (tests only). An auditor's verifier talks to it exactly as
to an honest server, so whatever it accepts from the proxy it would accept from a dishonest
operator's server."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from web.server import bound_socket

Rewrite = Callable[[str, Any], Any]
"""(request path, decoded JSON answer) -> the JSON to send instead."""


def _app(upstream: str, rewrite: Rewrite) -> Starlette:
    client = httpx.AsyncClient(base_url=upstream, timeout=60)

    async def forward(request: Request) -> Response:
        answer = await client.request(
            request.method,
            request.url.path,
            params=request.query_params,
            headers={
                k: v
                for k, v in request.headers.items()
                if k.lower() in ("range", "if-range", "accept")
            },
        )
        body, media = answer.content, answer.headers.get("content-type", "application/octet-stream")
        if media.startswith("application/json"):
            body = json.dumps(rewrite(request.url.path, answer.json())).encode()
        headers = {
            k: v
            for k, v in answer.headers.items()
            if k.lower() in ("etag", "content-range", "cache-control")
        }
        return Response(body, status_code=answer.status_code, headers=headers, media_type=media)

    return Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "HEAD"])])


@contextlib.contextmanager
def lying_proxy(upstream: str, rewrite: Rewrite) -> Iterator[str]:
    """Serve the proxy in front of ``upstream`` and yield its URL."""
    sock = bound_socket("127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(_app(upstream, rewrite), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the proxy did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
