"""The run channel's ordering contract: a confirmed write is readable before anything the
writer sends next, even when the writer's link to the channel is slow (a real TCPStore behind
a proxy that holds the writer's bytes back)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from trainer.runtime.channel import ChannelAddress, RunChannel, serve_channel

HOLD_SECONDS = 0.5


def _pump(source: socket.socket, sink: socket.socket, delay: float) -> None:
    try:
        while data := source.recv(65536):
            if delay:
                time.sleep(delay)
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            end.close()


@pytest.fixture
def slow_link() -> Iterator[tuple[ChannelAddress, ChannelAddress]]:
    """(the channel, the channel behind a link that delays what the client sends)."""
    store = serve_channel(0, host="127.0.0.1")
    port = store.port
    listener = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", port))
            for a, b, delay in ((client, upstream, HOLD_SECONDS), (upstream, client, 0.0)):
                threading.Thread(target=_pump, args=(a, b, delay), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield (
            ChannelAddress("127.0.0.1", port),
            ChannelAddress("127.0.0.1", listener.getsockname()[1]),
        )
    finally:
        listener.close()
        del store  # the store serves until dropped


def _channel(address: ChannelAddress) -> RunChannel:
    return RunChannel(address, "run", connect_timeout=timedelta(seconds=10))


def test_a_confirmed_write_is_readable_when_put_returns(
    slow_link: tuple[ChannelAddress, ChannelAddress],
) -> None:
    direct, slow = slow_link
    writer, reader = _channel(slow), _channel(direct)
    writer.put("round/3/header/1/0", {"digest": "ab"}, confirmed=True)
    assert reader.get("round/3/header/1/0") == {"digest": "ab"}


def test_an_unconfirmed_write_can_still_be_on_the_wire(
    slow_link: tuple[ChannelAddress, ChannelAddress],
) -> None:
    """Why ``confirmed`` exists: TCPStore does not acknowledge a plain ``set``."""
    direct, slow = slow_link
    writer, reader = _channel(slow), _channel(direct)
    writer.put("round/3/header/1/0", {"digest": "ab"})
    assert reader.get("round/3/header/1/0") is None
    deadline = time.monotonic() + 10 * HOLD_SECONDS
    while reader.get("round/3/header/1/0") is None:
        assert time.monotonic() < deadline, "the write never arrived"
        time.sleep(0.02)
