"""A lean HTTP/1.1 load generator for latency benchmarks.

The benchmark machine runs the server under test and its clients on the same cores, so every
CPU-millisecond the load generator spends is one the server does not get. A general-purpose
client (httpx) spends about as much CPU per request as the server's whole proof handler
(measured on the 2-core VM: 1.3 ms against 1.1 ms), which doubles the latency under load for
reasons that have nothing to do with the server. This is the same reason load generators such
as ``wrk`` are written in C.

So this module speaks just enough HTTP/1.1 (RFC 9112) for the benchmark: ``GET`` on a
persistent connection, a response framed by ``Content-Length``. Anything else (a chunked or
unframed body, a malformed status line, a closed connection) raises ``BenchError`` rather than
being guessed at: a benchmark that silently mis-parses would report nonsense.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import urlencode, urlsplit

from veritrain.errors import BenchError


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes


class Connection:
    """One persistent connection to ``base`` (``http://host:port``); requests run one at a
    time on it, as on a browser's or an auditor's keep-alive connection."""

    def __init__(self, base: str) -> None:
        parts = urlsplit(base)
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            raise BenchError(f"expected a base URL like http://host:port, got {base!r}")
        self.host = parts.hostname
        self.port = parts.port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> Connection:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(
                ConnectionError
            ):  # the server closed first: nothing to release
                await self._writer.wait_closed()

    async def get(self, path: str, params: dict[str, object] | None = None) -> Response:
        if self._reader is None or self._writer is None:
            raise BenchError("the connection is not open (use `async with Connection(...)`)")
        target = f"{path}?{urlencode(params)}" if params else path
        try:
            self._writer.write(
                f"GET {target} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n\r\n".encode("ascii")
            )
            await self._writer.drain()
            head = await self._reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError) as error:
            raise BenchError(
                f"the server closed the connection before answering GET {target}"
            ) from error
        except asyncio.LimitOverrunError as error:
            raise BenchError(
                f"GET {target}: response headers over the stream's 64 KiB limit"
            ) from error
        status, length = _parse_head(head, target)
        try:
            body = await self._reader.readexactly(length) if length else b""
        except (asyncio.IncompleteReadError, ConnectionError) as error:
            raise BenchError(
                f"GET {target}: the connection closed inside a {length}-byte body"
            ) from error
        return Response(status=status, body=body)


def _parse_head(head: bytes, target: str) -> tuple[int, int]:
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise BenchError(f"GET {target}: not an HTTP/1.x status line: {lines[0]!r}")
    length: int | None = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            if not value.strip().isdigit():
                raise BenchError(f"GET {target}: bad Content-Length {value.strip()!r}")
            length = int(value.strip())
        elif name == "transfer-encoding":
            raise BenchError(
                f"GET {target}: Transfer-Encoding {value.strip()!r} is not supported here"
            )
    if length is None:
        raise BenchError(f"GET {target}: the response has no Content-Length")
    return int(code), length
