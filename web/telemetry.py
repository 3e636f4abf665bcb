"""Prometheus metrics of the app: requests and latencies by route template, bytes served.

A pure ASGI middleware (it must see every body chunk, including ``FileResponse``'s, to count
bytes, which ``BaseHTTPMiddleware`` would buffer). Routes are labelled by their template
(``/api/v1/objects/{sha256}``), never by the raw path, so a scan of random URLs cannot
explode the number of time series; anything no route matched is labelled ``unmatched``.

Each app has its own ``CollectorRegistry``: several apps in one process (tests, a demo
next to a benchmark) do not collide in the global registry.
"""

from __future__ import annotations

import os
import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNMATCHED = "unmatched"

# Latency buckets from 5 ms (a cached JSON answer) to 5 min (a large download).
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class Telemetry:
    """The app's metrics and their registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "veritrain_http_requests",
            "HTTP requests answered, by method, route template and status code.",
            ("method", "route", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "veritrain_http_request_duration_seconds",
            "Time from the request to the last byte of the answer, by method and route template.",
            ("method", "route"),
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.bytes_sent = Counter(
            "veritrain_http_response_body_bytes",
            "Response body bytes sent, by route template.",
            ("route",),
            registry=self.registry,
        )

    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class TelemetryMiddleware:
    """Counts every HTTP request once it has been answered."""

    def __init__(self, app: ASGIApp, telemetry: Telemetry) -> None:
        self.app = app
        self.telemetry = telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client sees if the app raises before answering
        sent = 0

        async def counting_send(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            elif message["type"] == "http.response.pathsend":
                sent += _file_size(message["path"])
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            route = _route_template(scope)
            method = scope["method"]
            self.telemetry.requests.labels(method, route, str(status)).inc()
            self.telemetry.latency.labels(method, route).observe(time.perf_counter() - started)
            self.telemetry.bytes_sent.labels(route).inc(sent)


def _route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) and path else UNMATCHED


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
