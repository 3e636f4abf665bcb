"""The benchmark's lean HTTP/1.1 client against small real servers on a loopback socket."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from veritrain.bench.http_load import Connection
from veritrain.errors import BenchError

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(handler: Handler, requests: Callable[[Connection], Awaitable[object]]) -> object:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with Connection(f"http://127.0.0.1:{port}") as http:
            return await requests(http)
    finally:
        server.close()
        await server.wait_closed()


def _answering(*answers: bytes, seen: list[bytes] | None = None) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for answer in answers:
            request = await reader.readuntil(b"\r\n\r\n")
            if seen is not None:
                seen.append(request)
            writer.write(answer)
            await writer.drain()
        writer.close()

    return handler


def test_keep_alive_requests_read_status_and_body() -> None:
    seen: list[bytes] = []
    handler = _answering(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello",
        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
        seen=seen,
    )

    async def two(http: Connection) -> object:
        return await http.get("/a", {"index": 3, "size": 10}), await http.get("/b")

    first, second = asyncio.run(_serve(handler, two))  # type: ignore[misc]
    assert (first.status, first.body) == (200, b"hello")
    assert (second.status, second.body) == (404, b"")
    # Both requests went over the one connection, with the query encoded.
    assert seen[0].startswith(b"GET /a?index=3&size=10 HTTP/1.1\r\nHost: 127.0.0.1:")
    assert seen[1].startswith(b"GET /b HTTP/1.1\r\n")


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            "Transfer-Encoding",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", "no Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n", "bad Content-Length"),
        (b"SMTP ready\r\n\r\n", "not an HTTP/1.x status line"),
    ],
)
def test_responses_it_cannot_frame_are_refused(answer: bytes, message: str) -> None:
    with pytest.raises(BenchError, match=message):
        asyncio.run(_serve(_answering(answer), lambda http: http.get("/")))


def test_a_connection_closed_before_the_answer_is_an_error() -> None:
    with pytest.raises(BenchError, match="closed the connection before answering GET /x"):
        asyncio.run(_serve(_answering(), lambda http: http.get("/x")))


def test_only_plain_http_base_urls() -> None:
    with pytest.raises(BenchError, match="http://host:port"):
        Connection("https://example.org")


def test_a_body_cut_short_is_an_error() -> None:
    handler = _answering(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
    with pytest.raises(BenchError, match="closed inside a 100-byte body"):
        asyncio.run(_serve(handler, lambda http: http.get("/")))
