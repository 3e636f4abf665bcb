"""Helpers shared by the witness tests (ledger, web, veritrain, integration): a small real
log to take tree heads and proofs from, add-checkpoint bodies written by hand from the
tlog-witness text, and an ASGI app served by uvicorn on a loopback port.

A uniquely named module: import it as ``from unit.ledger.witness_helpers import ...``.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp

from ledger.db import create_engine
from ledger.keyring import InMemoryLogKeys
from ledger.service import Ledger
from web.server import bound_socket

ORIGIN_PREFIX = "test.veritrain.local"


@dataclass
class SmallLog:
    """A run's log in a real (SQLite or PostgreSQL) ledger."""

    ledger: Ledger
    run_id: str
    keys: InMemoryLogKeys

    @property
    def origin(self) -> str:
        return f"{ORIGIN_PREFIX}/runs/{self.run_id}"

    @property
    def vkey(self) -> str:
        return self.keys(self.origin).public.vkey

    def grow(self, count: int) -> None:
        for i in range(count):
            self.ledger.append(
                self.run_id, "note", {"i": i, "at": self.ledger.get_run(self.run_id).size}
            )

    def note(self, size: int | None = None) -> str:
        head = (
            self.ledger.latest_tree_head(self.run_id)
            if size is None
            else self.ledger.tree_head_at(self.run_id, size)
        )
        return head.note

    def proof(self, old: int, new: int) -> list[bytes]:
        return list(self.ledger.consistency_proof(self.run_id, old, new).hashes)


def small_log(database_url: str, run_id: str = "w-run", *, entries: int = 5) -> SmallLog:
    """A run of ``entries`` entries (genesis included) in the migrated database at the URL."""
    keys = InMemoryLogKeys()
    ledger = Ledger(create_engine(database_url), origin=ORIGIN_PREFIX, log_keys=keys)
    ledger.create_run(run_id, {"model": "tiny"})
    log = SmallLog(ledger=ledger, run_id=run_id, keys=keys)
    log.grow(entries - 1)
    return log


def add_checkpoint_body(old: int, proof: Sequence[bytes], note: str) -> bytes:
    """tlog-witness: "old <size>" line, one base64 line per proof hash, an empty line, the
    checkpoint -- every line newline-terminated."""
    lines = [f"old {old}\n", *(base64.b64encode(h).decode() + "\n" for h in proof), "\n"]
    return ("".join(lines) + note).encode()


@contextmanager
def serve_in_thread(app: ASGIApp) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port for the ``with`` block; yield its
    base URL. The server stops (and its lifespan closes) when the block exits."""
    sock = bound_socket("127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
