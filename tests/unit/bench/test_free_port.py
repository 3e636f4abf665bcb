"""``free_port`` hands a server in another process a port that no outgoing connection can take
between the check and the server's bind: one below the OS's ephemeral range."""

from __future__ import annotations

import socket

import pytest

from veritrain.bench import server
from veritrain.bench.server import EPHEMERAL_PORTS, free_port


def test_free_ports_lie_below_the_ephemeral_range_and_can_be_bound() -> None:
    low = int(EPHEMERAL_PORTS.read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(port < low for port in ports), (ports, low)
    assert len(ports) > 1  # chosen at random: parallel test workers rarely pick the same one
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        busy = taken.getsockname()[1]
        draws = iter([busy, busy, busy + 1])

        class Draws:
            def randrange(self, start: int, stop: int) -> int:
                return next(draws)

        monkeypatch.setattr(server, "_random", Draws())
        assert free_port() == busy + 1
