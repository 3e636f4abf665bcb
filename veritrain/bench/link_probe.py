"""Measure what a link actually carries: one TCP transfer, timed at the receiver.

The comm benchmark's preflight runs ``receive`` in one cluster's namespace and ``send`` in
another's, so the bytes cross the shaped veth pair exactly as the training traffic will::

    python -m veritrain.bench.link_probe receive HOST PORT      # prints one JSON line
    python -m veritrain.bench.link_probe send HOST PORT NBYTES

The rate is taken from the first byte to the last, after the first 10 % (tbf lets a burst
through at wire speed before it starts metering).
"""

from __future__ import annotations

import json
import socket
import sys
import time

CHUNK = 64 * 1024


def receive(host: str, port: int) -> dict[str, float]:
    with socket.create_server((host, port)) as server:
        print("listening", flush=True)
        connection, _ = server.accept()
        with connection:
            marks: list[tuple[float, int]] = []
            total = 0
            while data := connection.recv(CHUNK):
                total += len(data)
                marks.append((time.perf_counter(), total))
    skip = next((m for m in marks if m[1] >= total * 0.1), marks[0])
    seconds = marks[-1][0] - skip[0]
    return {
        "bytes": float(total),
        "seconds": seconds,
        "mbit_per_s": (total - skip[1]) * 8 / seconds / 1e6,
    }


def send(host: str, port: int, nbytes: int) -> None:
    block = b"\0" * CHUNK
    deadline = time.monotonic() + 30
    while True:
        try:
            connection = socket.create_connection((host, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with connection:
        remaining = nbytes
        while remaining > 0:
            connection.sendall(block[: min(CHUNK, remaining)])
            remaining -= CHUNK


def main(argv: list[str]) -> None:
    if argv[:1] == ["receive"]:
        print(json.dumps(receive(argv[1], int(argv[2]))), flush=True)
    elif argv[:1] == ["send"]:
        send(argv[1], int(argv[2]), int(argv[3]))
    else:
        raise SystemExit("usage: link_probe receive HOST PORT | send HOST PORT NBYTES")


if __name__ == "__main__":
    main(sys.argv[1:])
