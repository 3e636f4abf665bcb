"""The run channel: the small messages clusters send each other, outside any torch world.

Each cluster is its own ``torch.distributed`` world, and the payload exchange between clusters
runs over torchft's process group, which exists only inside a quorum (membership.py). What
else must cross clusters is small and not collective: every cluster's enrolment before the
genesis, the contribution headers of every round, each cluster's step reports, the
coordinator's attestation request and every cluster's evidence, and which steps are recorded.
It travels through a key-value store served next to the lighthouse (lighthouse.py): a
``torch.distributed.TCPStore``, which every cluster already reaches, which keeps a message
until it is read, and which needs nothing new on the wire. Messages are JSON (floats
round-trip exactly through Python's shortest repr), never pickles.

A message is written once under a key that names it (``round/7/header/2/0``); readers wait for
the key. A reader never waits on a dead writer for ever: each cluster beats a counter
(:class:`Heartbeat`), and :class:`Liveness` calls a cluster gone once its counter has not moved
for the heartbeat timeout -- the same bound the lighthouse applies to its own heartbeats, so a
cluster the quorum has dropped is not waited for here either.

The channel is unauthenticated, like torchft's lighthouse and stores: run them on a network
the clusters share, not on the internet. Nothing it carries is trusted for what the ledger
proves -- contributions, quotes and enrolments are signed by the clusters' own keys and
checked by ``veritrain verify``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import torch.distributed as dist

from trainer.errors import WorkerError

CHANNEL_PORT_OFFSET = 1
"""The channel listens on the lighthouse's port + 1 (``veritrain lighthouse --port P`` serves
torchft's lighthouse on P and the channel on P + 1)."""
HEARTBEAT_INTERVAL = 0.25
"""Seconds between two beats of a cluster's counter."""
RECORD_PATIENCE = 3.0
"""Heartbeat timeouts the coordinator lets a contributor stay silent before it records the
step without that cluster's report and quote (step_reporting.py). Giving up on a live cluster
writes a record ``veritrain verify`` refuses -- a cluster that quoted the next step must have
quoted this one (check 5) -- and a live cluster can look silent for a few seconds: its beats come
from a Python thread, which a loaded machine can starve. Waiting longer for a cluster that really
died only delays one step's record. The other clusters wait as long for the coordinator to begin
the run or record a step they catch up from (joining.py): giving up on it ends their run."""
MAX_POLL_SECONDS = 0.05
"""Longest pause between two looks at a key that is not there yet (polling with ``check``:
a store-side wait that times out logs a warning every time)."""


@dataclass(frozen=True)
class ChannelAddress:
    host: str
    port: int

    @classmethod
    def of_lighthouse(cls, url: str) -> ChannelAddress:
        """The channel of the lighthouse at ``url`` (``http://host:port``)."""
        parts = urlsplit(url if "//" in url else f"http://{url}")
        if parts.hostname is None or parts.port is None:
            raise WorkerError(f"expected a lighthouse address like http://host:29510, got {url!r}")
        return cls(parts.hostname, parts.port + CHANNEL_PORT_OFFSET)


class ChannelError(WorkerError):
    """A message could not be had: its writer is gone, or the channel is unreachable."""


class RunChannel:
    """One process's connection to the run's channel; keys live under ``veritrain/<run id>/``."""

    def __init__(self, address: ChannelAddress, run_id: str, *, connect_timeout: timedelta) -> None:
        self.address = address
        self.prefix = f"veritrain/{run_id}/"
        self.connect_timeout = connect_timeout
        self._store = _connect(address, connect_timeout)

    def put(self, key: str, message: Any, *, confirmed: bool = False) -> None:
        """Write ``message`` under ``key``. TCPStore's ``set`` is not acknowledged: it returns
        once the bytes are handed to the socket. With ``confirmed`` the call also waits for an
        answer on the same connection (the store serves a connection's commands in order), so
        the message is readable before anything this process sends next over another
        connection -- a torchft quorum request, which on a slow link can otherwise arrive first."""
        full = self.prefix + key
        self._store.set(full, json.dumps(message, sort_keys=True))
        if confirmed:
            self._store.check([full])

    def get(self, key: str) -> Any | None:
        """The message under ``key``, or None when nobody wrote it yet (does not wait)."""
        full = self.prefix + key
        if not self._store.check([full]):
            return None
        return json.loads(self._store.get(full))

    def wait(self, key: str, *, writer_alive: Callable[[], bool], what: str) -> Any:
        """The message under ``key``, waiting as long as its writer is alive."""
        for pause in _pauses():
            message = self.get(key)
            if message is not None:
                return message
            if not writer_alive():
                raise ChannelError(f"gave up waiting for {what}: its sender stopped beating")
            time.sleep(pause)
        raise AssertionError("unreachable: _pauses() never ends")

    def wait_all(self, keys: dict[int, str], *, alive: Callable[[int], bool]) -> dict[int, Any]:
        """Messages from several writers (cluster -> key): each one's, or none from a writer
        that stopped beating before it wrote. Returns what arrived, by cluster."""
        got: dict[int, Any] = {}
        pending = dict(keys)
        for pause in _pauses():
            for cluster, key in list(pending.items()):
                message = self.get(key)
                if message is not None:
                    got[cluster] = message
                    del pending[cluster]
                elif not alive(cluster):
                    del pending[cluster]
            if not pending:
                return got
            time.sleep(pause)
        raise AssertionError("unreachable: _pauses() never ends")

    def global_message(self, key: str) -> Any | None:
        """A message outside the run's keys (the lighthouse's settings)."""
        if not self._store.check([key]):
            return None
        return json.loads(self._store.get(key))

    def counter(self, key: str) -> int:
        return int(self._store.add(self.prefix + key, 0))

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._store.delete_key(self.prefix + key)


class Heartbeat:
    """Beats ``alive/<cluster>`` every ``HEARTBEAT_INTERVAL`` seconds from a thread of its own
    (with its own connection), until closed."""

    def __init__(self, channel: RunChannel, cluster: int) -> None:
        self._store = _connect(channel.address, channel.connect_timeout)
        self._key = channel.prefix + alive_key(cluster)
        self._stop = threading.Event()
        self._store.add(self._key, 1)
        self._thread = threading.Thread(
            target=self._run, name=f"veritrain-heartbeat-{cluster}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_INTERVAL):
            try:
                self._store.add(self._key, 1)
            except RuntimeError:  # the channel went away: the run is ending or lost; stop beating
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * HEARTBEAT_INTERVAL + 1)


class Liveness:
    """Whether a cluster still beats: its counter moved within ``timeout`` of now. A cluster
    never seen beating gets ``grace`` from the first time it is asked about (it may still be
    starting: importing torch, building its corpus)."""

    def __init__(self, channel: RunChannel, timeout: timedelta, *, grace: timedelta) -> None:
        self._channel = channel
        self._timeout = timeout.total_seconds()
        self._grace = grace.total_seconds()
        self._seen: dict[int, tuple[int, float]] = {}

    def patient(self, factor: float) -> Liveness:
        """A liveness of its own that calls a cluster gone only after ``factor`` times this one's
        timeout (the same grace for a cluster never seen beating)."""
        if not factor >= 1.0:
            raise WorkerError(f"expected a patience factor >= 1, got {factor}")
        return Liveness(
            self._channel,
            timedelta(seconds=self._timeout * factor),
            grace=timedelta(seconds=self._grace),
        )

    def __call__(self, cluster: int) -> bool:
        value = self._channel.counter(alive_key(cluster))
        now = time.monotonic()
        last = self._seen.get(cluster)
        if last is None or last[0] != value:
            self._seen[cluster] = (value, now)
            return True
        return now - last[1] < (self._timeout if value > 0 else self._grace)


def _pauses() -> Iterator[float]:
    """2 ms, 4 ms, ... up to ``MAX_POLL_SECONDS``, for ever."""
    pause = 0.002
    while True:
        yield pause
        pause = min(2 * pause, MAX_POLL_SECONDS)


def alive_key(cluster: int) -> str:
    return f"alive/{cluster}"


def serve_channel(port: int, *, host: str = "0.0.0.0") -> Any:
    """Start the channel's store in this process (it serves until the object is dropped)."""
    # TCPStore is public API; torch's stubs just do not re-export it from torch.distributed.
    return dist.TCPStore(  # type: ignore[attr-defined]
        host, port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60)
    )


def _connect(address: ChannelAddress, timeout: timedelta) -> Any:
    try:
        return dist.TCPStore(  # type: ignore[attr-defined]
            address.host, address.port, is_master=False, wait_for_workers=False, timeout=timeout
        )
    except RuntimeError as exc:
        raise ChannelError(
            "cannot reach the run channel at "
            f"{address.host}:{address.port} (the lighthouse's port + "
            f"{CHANNEL_PORT_OFFSET}): {exc}"
        ) from None
