"""The lighthouse: torchft's quorum server, and the run channel next to it.

``veritrain lighthouse`` runs one for clusters on several hosts; ``veritrain train`` on one
host starts one in its own process. It serves

* torchft's ``LighthouseServer`` on ``port``: it forms each round's quorum from the clusters
  (torchft replica groups) that ask for one and still send heartbeats (membership.py);
* the run channel on ``port + 1`` (channel.py), where it also publishes its own settings, so
  every cluster waits for a silent peer exactly as long as the lighthouse does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from trainer.errors import ConfigError, WorkerError
from trainer.runtime.channel import CHANNEL_PORT_OFFSET, serve_channel

SETTINGS_KEY = "veritrain/lighthouse"
"""Where the lighthouse publishes its settings on the channel (outside any run's keys)."""


@dataclass(frozen=True, kw_only=True)
class LighthouseSettings:
    min_clusters: int = 1
    """torchft's ``min_replicas``: no quorum forms with fewer clusters."""
    heartbeat_timeout: float = 5.0
    """Seconds without a heartbeat after which a cluster counts as gone (torchft's default):
    the bound on how long a dead or cut-off cluster holds the others up."""
    join_timeout: float = 30.0
    """Seconds a quorum that could form waits for clusters that still beat but have not asked
    yet: the bound for a cluster that hangs with its heartbeat thread alive. Longer than the
    usual spread of the clusters' arrival at the end of a round."""
    quorum_tick: float = 0.01
    """Seconds between two looks at the waiting clusters (latency added to every quorum)."""
    exchange_timeout: float = 600.0
    """Seconds one exchange of payloads may take before a silent peer counts as gone (the
    bound for a cluster cut off in the middle of an exchange): longer than the slowest
    expected exchange on the run's links."""

    def __post_init__(self) -> None:
        if self.min_clusters < 1:
            raise ConfigError(
                f"LighthouseSettings.min_clusters must be >= 1, got {self.min_clusters}"
            )
        for name in ("heartbeat_timeout", "join_timeout", "quorum_tick", "exchange_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(
                    f"LighthouseSettings.{name} must be > 0 seconds, got {getattr(self, name)}"
                )

    def to_message(self) -> dict[str, float]:
        return {
            "min_clusters": self.min_clusters,
            "heartbeat_timeout": self.heartbeat_timeout,
            "join_timeout": self.join_timeout,
            "quorum_tick": self.quorum_tick,
            "exchange_timeout": self.exchange_timeout,
        }

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> LighthouseSettings:
        return cls(
            min_clusters=int(message["min_clusters"]),
            heartbeat_timeout=float(message["heartbeat_timeout"]),
            join_timeout=float(message["join_timeout"]),
            quorum_tick=float(message["quorum_tick"]),
            exchange_timeout=float(message["exchange_timeout"]),
        )

    @property
    def heartbeat(self) -> timedelta:
        return timedelta(seconds=self.heartbeat_timeout)

    @property
    def exchange(self) -> timedelta:
        return timedelta(seconds=self.exchange_timeout)


class Lighthouse:
    """A running lighthouse and channel; ``close`` stops both."""

    def __init__(
        self, *, host: str, port: int, advertise: str, settings: LighthouseSettings
    ) -> None:
        os.environ.setdefault("RUST_LOG", "warn")
        from torchft._torchft import LighthouseServer

        self.settings = settings
        self.advertise = advertise
        attempts = 1 if port else 20
        for _ in range(
            attempts
        ):  # port 0: the OS picks one, and the channel needs the next one free
            self._server = LighthouseServer(
                bind=f"{_bind_host(host)}:{port}",
                min_replicas=settings.min_clusters,
                join_timeout_ms=int(settings.join_timeout * 1000),
                quorum_tick_ms=max(1, int(settings.quorum_tick * 1000)),
                heartbeat_timeout_ms=int(settings.heartbeat_timeout * 1000),
            )
            self.port = int(self._server.address().rsplit(":", 1)[1])
            try:
                self._channel = serve_channel(self.port + CHANNEL_PORT_OFFSET, host=host)
                break
            except RuntimeError as exc:
                self._server.shutdown()
                if port:
                    raise WorkerError(
                        "cannot serve the run channel on port "
                        f"{port + CHANNEL_PORT_OFFSET} (the lighthouse's + "
                        f"{CHANNEL_PORT_OFFSET}): {exc}"
                    ) from None
        else:
            raise WorkerError("found no free pair of ports for the lighthouse and its channel")
        self._channel.set(SETTINGS_KEY, _json(settings.to_message()))

    @property
    def url(self) -> str:
        return f"http://{_url_host(self.advertise)}:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        del self._channel


def _bind_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _json(message: dict[str, float]) -> str:
    import json

    return json.dumps(message, sort_keys=True)
