"""``veritrain serve`` in its own process, for benchmarks that measure the HTTP API from outside.

A separate process (not a thread of the benchmark) so that the clients' work and the server's
do not share one interpreter lock: what the clients measure is what a remote client would see
from a server on this machine.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx

from veritrain.errors import BenchError

START_TIMEOUT_S = 60.0


EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")
"""Linux's range for ports the OS hands out (outgoing connections, ``bind(0)``)."""
_LOWEST = 10_000
_random = random.SystemRandom()


def free_port() -> int:
    """A TCP port nothing listens on right now, for a server started in another process.

    Chosen at random below the OS's ephemeral range (Linux: 32768-60999 by default) and
    checked free: a port the OS picks with ``bind(0)`` comes from that range, where any
    outgoing connection of any process -- a test beside this one, a database client -- may
    take it between this check and the server's bind ("address already in use"). Where the
    range leaves no room below it, the OS picks."""
    try:
        low = int(EPHEMERAL_PORTS.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    for _ in range(64 if low - _LOWEST >= 1_000 else 0):
        port = _random.randrange(_LOWEST, low)
        if port_is_free(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        chosen: int = sock.getsockname()[1]
        return chosen


def port_is_free(port: int) -> bool:
    """Whether a TCP server could bind ``port`` on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def served(settings_env: Mapping[str, str], *, log: Path, workers: int = 1) -> Iterator[str]:
    """Run ``python -m veritrain serve --workers N`` with ``settings_env`` added to the
    environment; yield its base URL once ``/healthz`` answers, and stop it (SIGINT, as
    Ctrl+C) afterwards."""
    port = free_port()
    env = {**os.environ, **settings_env}
    with open(log, "wb") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "veritrain",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                str(workers),
            ],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_healthy(process, url, log)
            yield url
        finally:
            _stop(process)


def _wait_healthy(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise BenchError(
                f"expected `veritrain serve` to start, it exited with {process.returncode}:\n{tail}"
            )
        try:
            if httpx.get(f"{url}/healthz", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.2)
    raise BenchError(
        f"expected `veritrain serve` to answer {url}/healthz "
        f"within {START_TIMEOUT_S:.0f} s, it did not"
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
