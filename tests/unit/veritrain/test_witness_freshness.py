"""What a witness's current view says about a served head: the same head (it counts), a
larger tree (a rollback), another tree (a fork), a smaller prefix (it lags), or nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from unit.ledger.witness_helpers import SmallLog, small_log

from ledger.db import upgrade
from ledger.tlog_checkpoint import Checkpoint
from veritrain.audit.verify.witness_freshness import judge_view
from veritrain.witnesses.views import WitnessView, WitnessViewError

AT = 1_800_000_000  # 2027-01-15 08:00:00 UTC


@pytest.fixture
def log(tmp_path: Path) -> SmallLog:
    upgrade(f"sqlite:///{tmp_path / 'log.db'}")
    return small_log(f"sqlite:///{tmp_path / 'log.db'}", entries=8)


def view(log: SmallLog, size: int, root: bytes | None = None) -> WitnessView:
    head = log.ledger.tree_head_at(log.run_id, size)
    return WitnessView(
        witness="w1",
        checkpoint=Checkpoint(log.origin, size, root or head.root_hash),
        timestamp=AT,
    )


def judge(log: SmallLog, seen: WitnessView | WitnessViewError, served: int = 6):
    root = log.ledger.tree_head_at(log.run_id, served).root_hash
    return judge_view(seen, "w1", served, root, log.proof)


def test_the_served_head_held_now_counts(log: SmallLog) -> None:
    verdict = judge(log, view(log, 6))
    assert (verdict.current, verdict.failure) == (True, None)
    assert verdict.note == "w1 holds this head now (2027-01-15 08:00:00Z)"


def test_a_larger_tree_held_now_is_a_rollback(log: SmallLog) -> None:
    verdict = judge(log, view(log, 8))
    assert not verdict.current
    assert verdict.failure == (
        "w1 now holds size 8 of this log (log-signed, cosigned 2027-01-15 08:00:00Z), newer "
        "than the served head of size 6: the log was rolled back to an older head, or it grew "
        "while this verify ran (run it again)"
    )


def test_another_tree_of_the_same_size_is_a_fork(log: SmallLog) -> None:
    verdict = judge(log, view(log, 6, root=b"\x01" * 32))
    assert not verdict.current
    assert verdict.failure is not None and verdict.failure.endswith("the log forked")


def test_a_witness_behind_on_a_prefix_lags_and_on_another_tree_is_a_fork(log: SmallLog) -> None:
    lagging = judge(log, view(log, 4))
    assert (lagging.current, lagging.failure) == (False, None)
    assert lagging.note == "w1 lags at size 4 (2027-01-15 08:00:00Z)"
    forked = judge(log, view(log, 4, root=b"\x02" * 32))
    assert forked.failure is not None
    assert forked.failure.startswith("w1 holds size 4, which the served head does not extend")


def test_no_view_does_not_count_and_does_not_fail(log: SmallLog) -> None:
    never = judge(log, WitnessView(witness="w1", checkpoint=None))
    assert (never.current, never.failure, never.note) == (
        False,
        None,
        "w1 says it never cosigned this log (404)",
    )
    down = judge(log, WitnessViewError("no answer from http://w1/x/checkpoint: ConnectError"))
    assert (down.current, down.failure) == (False, None)
    assert down.note.startswith("w1: current view not read: no answer")
