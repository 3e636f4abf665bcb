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

from trainer.errors import WorkerError
from trainer.runtime.channel import ChannelAddress, Heartbeat, Liveness, RunChannel, serve_channel

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


def test_a_patient_liveness_waits_out_a_silence_the_plain_one_calls_death() -> None:
    """A cluster whose beats stop (a starved heartbeat thread looks the same as a dead cluster)
    is gone for the plain liveness after its timeout, and for the coordinator's step records
    only after ``factor`` times that: a live cluster's quote is not dropped for a short
    silence."""
    store = serve_channel(0, host="127.0.0.1")
    channel = _channel(ChannelAddress("127.0.0.1", store.port))
    heartbeat = Heartbeat(channel, 1)
    plain = Liveness(channel, timedelta(seconds=0.6), grace=timedelta(seconds=30))
    patient = plain.patient(3.0)
    time.sleep(0.6)  # a couple of beats
    assert plain(1) and patient(1)
    heartbeat.close()  # silence from here on
    silent_since = time.monotonic()
    while time.monotonic() - silent_since < 1.2:
        time.sleep(0.1)
        assert patient(1)
    assert not plain(1)
    while patient(1):
        assert time.monotonic() - silent_since < 10, "the patient liveness never gave up"
        time.sleep(0.1)
    assert time.monotonic() - silent_since >= 1.5
    with pytest.raises(WorkerError, match="patience factor >= 1"):
        plain.patient(0.5)
    del store
