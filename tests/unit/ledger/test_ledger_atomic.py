"""An append that fails midway leaves nothing of the entry behind: no entry row, no tree
node, no tree head, no metric row, no change to the run. The next append takes the same
index and the log still audits."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from unit.ledger.ledger_helpers import ORIGIN, StepClock

from attestation.keys import SigningKey
from ledger.errors import ConflictError
from ledger.keyring import InMemoryLogKeys
from ledger.service import Ledger

TABLES = ("entries", "tree_nodes", "tree_heads", "metrics", "enrolled_keys")


class SigningUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class FailingKey(SigningKey):
    """The run's real log key, except that signing fails (an HSM or key server going away
    after the entry and tree nodes were already written)."""

    def sign(self, message: bytes) -> bytes:
        raise SigningUnavailable("log key unavailable")


class SwitchableKeys:
    def __init__(self) -> None:
        self.keys = InMemoryLogKeys()
        self.failing = False

    def __call__(self, origin: str) -> SigningKey:
        key = self.keys(origin)
        return FailingKey(name=key.name, seed=key.seed) if self.failing else key


def snapshot(engine: Engine) -> dict[str, object]:
    with engine.connect() as conn:
        counts: dict[str, object] = {
            table: conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()
            for table in TABLES
        }
        counts["run"] = tuple(
            conn.execute(sa.text("SELECT size, latest_step, outer_steps, status FROM runs")).one()
        )
    return counts


@pytest.fixture
def keys() -> SwitchableKeys:
    return SwitchableKeys()


@pytest.fixture
def switchable_ledger(engine: Engine, keys: SwitchableKeys) -> Ledger:
    ledger = Ledger(engine, origin=ORIGIN, log_keys=keys, clock=StepClock())
    ledger.create_run("r1", {})
    for t in range(3):  # index 3 is the next leaf: it completes two parent nodes
        ledger.append("r1", "outer_step", {}, step=t, metrics={"loss": 1.0})
    return ledger


def test_a_signing_failure_after_the_entry_and_tree_were_written_leaves_nothing(
    switchable_ledger: Ledger, keys: SwitchableKeys, engine: Engine
) -> None:
    before = snapshot(engine)
    keys.failing = True
    with pytest.raises(SigningUnavailable):
        switchable_ledger.append("r1", "outer_step", {"t": 3}, step=3, metrics={"loss": 0.5})
    assert snapshot(engine) == before

    keys.failing = False
    entry = switchable_ledger.append("r1", "outer_step", {"t": 3}, step=3, metrics={"loss": 0.5})
    assert entry.index == 4
    assert switchable_ledger.audit_run("r1").size == 5


def test_a_metric_insert_failing_in_the_database_leaves_nothing(
    switchable_ledger: Ledger, engine: Engine
) -> None:
    # An evaluation entry for step 2 repeating the metric key step 2 already has: the
    # metrics primary key (run, step, key) rejects it after entry, nodes and head are written.
    before = snapshot(engine)
    with pytest.raises(ConflictError, match="cannot record entry 4"):
        switchable_ledger.append("r1", "eval", {}, step=2, metrics={"loss": 9.0})
    assert snapshot(engine) == before
    assert switchable_ledger.audit_run("r1").size == 4
    assert switchable_ledger.append("r1", "eval", {}, step=2, metrics={"eval_loss": 9.0}).index == 4
