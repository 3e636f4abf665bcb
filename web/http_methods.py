"""HEAD on every GET route, and a true ``Allow`` on every 405 (RFC 9110 §9.3.2, §15.5.6).

FastAPI's routes answer exactly the methods they are declared with, so a ``GET`` route
answered ``HEAD`` with 405 -- and clients that probe with ``HEAD`` before downloading
(``huggingface_hub``, ``curl -I``, link checkers, caches) failed on the run, checkpoint and tile
routes. And a 405 names only the methods of the *first* route whose path matched: the object
and resolve routes are declared once for ``GET`` and once for ``HEAD``, so a ``POST`` there
was told ``Allow: HEAD`` although ``GET`` works.

:class:`HttpMethodsMiddleware` fixes both at the edge, over the app's route table:

- a ``HEAD`` for a path that some route answers with ``GET`` but none with ``HEAD`` is
  dispatched as that ``GET`` (same status, same headers: RFC 9110 §9.3.2), and the body is
  dropped;
- every 405 carries ``Allow`` = the methods of every route whose path matches, ``HEAD``
  included wherever ``GET`` is (RFC 9110 §15.5.6: the server MUST send it).

Routes that declare ``HEAD`` themselves (object downloads, Hub-style ``resolve``) still get
it, so they keep answering without reading the object.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from fastapi.routing import iter_route_contexts
from starlette.datastructures import MutableHeaders
from starlette.routing import BaseRoute, Match, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATIC_METHODS = frozenset({"GET", "HEAD"})
"""What Starlette's StaticFiles answers."""


def allowed_methods(routes: Sequence[BaseRoute], scope: Scope) -> set[str]:
    """Every method some route of ``routes`` answers at ``scope``'s path (whatever the
    request's own method), with ``HEAD`` wherever ``GET`` is."""
    probe = dict(scope)  # matching must not write path params into the request's scope
    methods: set[str] = set()
    for route in iter_route_contexts(routes):
        match, _ = route.matches(probe)
        if match == Match.NONE:
            continue
        declared: Collection[str] = route.methods or ()
        if isinstance(route.original_route, Mount) and isinstance(
            route.original_route.app, StaticFiles
        ):
            declared = STATIC_METHODS
        methods |= set(declared)
    if "GET" in methods:
        methods.add("HEAD")
    return methods


def allow_header(methods: set[str]) -> str:
    """The ``Allow`` field value, in a stable order."""
    return ", ".join(sorted(methods))


class HttpMethodsMiddleware:
    """See the module docstring. ``routes`` returns the app's live route table."""

    def __init__(self, app: ASGIApp, *, routes: Callable[[], Sequence[BaseRoute]]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        pristine = dict(scope)
        head = scope["method"] == "HEAD"
        if head and self._get_answers_head(pristine):
            scope = {**scope, "method": "GET"}

        async def send_checked(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                allowed = allowed_methods(self.routes(), pristine)
                MutableHeaders(scope=message)["Allow"] = allow_header(allowed)
            if head and message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return  # HEAD: the headers of the GET, no content
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app(scope, receive, send_checked)

    def _get_answers_head(self, scope: Scope) -> bool:
        """True when, in routing order, a route answering ``GET`` at this path comes before
        any route answering ``HEAD`` there itself (which then gets the HEAD as it is)."""
        for route in iter_route_contexts(self.routes()):
            if route.matches({**scope, "method": "HEAD"})[0] == Match.FULL:
                return False
            if route.matches({**scope, "method": "GET"})[0] == Match.FULL:
                return True
        return False
