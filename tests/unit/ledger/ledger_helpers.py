"""Helpers shared by the ledger tests (a uniquely named module: several test folders have a
``conftest.py``, so ``from conftest import ...`` would depend on which was imported first)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ledger.keyring import InMemoryLogKeys

ORIGIN = "test.veritrain.local"


class StepClock:
    """A clock that advances one second per reading, so timestamps are distinct and
    predictable."""

    def __init__(self) -> None:
        self._now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self._now += timedelta(seconds=1)
        return self._now


def log_vkey(log_keys: InMemoryLogKeys, run_id: str) -> str:
    return log_keys(f"{ORIGIN}/runs/{run_id}").public.vkey
