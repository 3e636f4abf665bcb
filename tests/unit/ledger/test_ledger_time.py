"""``recorded_at`` only moves forward: a clock that steps back (NTP, a moved VM) must not make
an honest log fail the verifier, which insists on it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from unit.ledger.ledger_helpers import ORIGIN

from ledger.db import create_engine, upgrade
from ledger.keyring import InMemoryLogKeys
from ledger.service import Ledger


def test_entries_are_recorded_strictly_after_each_other_even_when_the_clock_steps_back(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    upgrade(url)
    start = datetime(2026, 6, 1, tzinfo=UTC)
    readings = iter(
        [
            start,
            start - timedelta(hours=1),
            start - timedelta(hours=1),
            start + timedelta(seconds=5),
        ]
    )
    engine = create_engine(url)
    try:
        ledger = Ledger(
            engine, origin=ORIGIN, log_keys=InMemoryLogKeys(), clock=lambda: next(readings)
        )
        ledger.create_run("r1", {})
        ledger.append("r1", "data.manifest", {})
        ledger.append("r1", "outer_step", {}, step=0)
        ledger.append("r1", "outer_step", {}, step=1)
        times = [e.recorded_at for e in ledger.entries("r1", 0, 10)]
    finally:
        engine.dispose()

    assert times == [
        start,
        start + timedelta(microseconds=1),
        start + timedelta(microseconds=2),
        start + timedelta(seconds=5),
    ]
