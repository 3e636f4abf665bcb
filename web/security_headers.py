"""Headers every answer carries, and the Content-Security-Policy of the audit pages.

``X-Content-Type-Options: nosniff`` on every response: an object downloaded from this server
is ``application/octet-stream`` and must never be sniffed into HTML or script by a browser
(objects are uploaded by trainers, not by this server's operator alone).

The pages' policy allows only this origin's own scripts and styles (Plotly is served from
``/static/vendor``, never a CDN), no inline script, no plugins, no framing, no form targets.
Styles allow ``'unsafe-inline'``: Plotly injects its stylesheet as inline ``<style>`` elements;
scripts, which are what CSP protects against, stay strict. ``/docs`` (FastAPI's
Swagger UI, which loads its assets from a CDN) is not one of these pages and keeps its own.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PAGE_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "connect-src 'self'",
        "font-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
"""The Content-Security-Policy of the HTML pages rendered from web/templates."""


class NoSniffMiddleware:
    """Adds ``X-Content-Type-Options: nosniff`` to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)["X-Content-Type-Options"] = "nosniff"
            await send(message)

        await self.app(scope, receive, send_with_header)
