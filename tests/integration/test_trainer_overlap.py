"""DiLoCoX with the one-step-delay overlap (2 clusters x 2 stages, gloo, CPU).

Under the delay a saved step still has its own exchange in flight; resuming must send that
payload again and continue exactly as the uninterrupted run, and re-executing a step must give
the same bits.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest
from integration.overlap_runs import STEPS, assert_same_state, overlapped_config, run

from trainer.api import reexecute_outer_step
from trainer.checkpoint_layout import TRAINER_STATE
from trainer.memory_recorder import MemoryRecording


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("overlap-corpus")


@pytest.fixture(scope="module")
def uninterrupted(data_dir: Path) -> MemoryRecording:
    return run(overlapped_config(), data_dir)


@pytest.fixture(scope="module")
def warmed_up(data_dir: Path) -> MemoryRecording:
    return run(overlapped_config(sync_rounds=1), data_dir)


def test_each_round_is_applied_one_step_late_and_the_last_one_at_the_end(
    uninterrupted: MemoryRecording,
) -> None:
    records = uninterrupted.records
    assert [[a.round for a in r.applied] for r in records] == [[], [0], [1], [2, 3]]
    assert all(len(r.contribution_digests) == 4 for r in records)
    # The digests a step applies are the ones every cluster contributed the step before.
    for earlier, later in itertools.pairwise(records):
        applied = {(c.cluster, c.stage): c.digest for c in later.applied[0].contribution_digests}
        assert applied == {(c.cluster, c.stage): c.digest for c in earlier.contribution_digests}
    pending = [
        uninterrupted.state(t).json[TRAINER_STATE]["cursor"]["pending_round"] for t in range(STEPS)
    ]
    assert pending == [0, 1, 2, None]


def test_resuming_with_an_exchange_in_flight_continues_bitwise(
    uninterrupted: MemoryRecording, data_dir: Path
) -> None:
    resumed = run(overlapped_config(), data_dir, resume=uninterrupted.state(1))
    assert [r.step for r in resumed.records] == [2, 3]
    for step in (2, 3):
        assert_same_state(resumed.state(step), uninterrupted.state(step))


def test_reexecuting_an_overlapped_step_reproduces_it_bitwise(
    uninterrupted: MemoryRecording, data_dir: Path
) -> None:
    again = reexecute_outer_step(overlapped_config(), uninterrupted.state(1), 2, data_dir=data_dir)
    assert_same_state(again.files, uninterrupted.state(2))
    assert again.record.contribution_digests == uninterrupted.records[2].contribution_digests


def test_reexecuting_the_last_step_which_also_applies_its_own_round_reproduces_it_bitwise(
    uninterrupted: MemoryRecording, data_dir: Path
) -> None:
    # The last step is the one `veritrain reproduce --step T` users try first: it restarts the
    # exchange in flight from the saved state and applies two rounds, its predecessor's and its own.
    last = STEPS - 1
    before = uninterrupted.state(last - 1)
    again = reexecute_outer_step(overlapped_config(), before, last, data_dir=data_dir)
    assert [a.round for a in again.record.applied] == [last - 1, last]
    assert_same_state(again.files, uninterrupted.state(last))
    assert again.record.contribution_digests == uninterrupted.records[last].contribution_digests


def test_a_warm_up_round_is_applied_in_its_own_step_and_the_delay_starts_after_it(
    warmed_up: MemoryRecording, data_dir: Path
) -> None:
    records = warmed_up.records
    assert [[a.round for a in r.applied] for r in records] == [[0], [], [1], [2, 3]]
    own = {(c.cluster, c.stage): c.digest for c in records[0].contribution_digests}
    assert {(c.cluster, c.stage): c.digest for c in records[0].applied[0].contribution_digests} == (
        own
    )
    pending = [
        warmed_up.state(t).json[TRAINER_STATE]["cursor"]["pending_round"] for t in range(STEPS)
    ]
    assert pending == [None, 1, 2, None]
    # Re-executing the warm-up step and the first delayed one gives the recorded bits, and a run
    # resumed after the warm-up continues as the uninterrupted one.
    for step in (0, 1, 2):
        before = warmed_up.state(step - 1) if step else None
        again = reexecute_outer_step(
            overlapped_config(sync_rounds=1), before, step, data_dir=data_dir
        )
        assert_same_state(again.files, warmed_up.state(step))
    resumed = run(overlapped_config(sync_rounds=1), data_dir, resume=warmed_up.state(0))
    for step in (1, 2, 3):
        assert_same_state(resumed.state(step), warmed_up.state(step))


def test_adaptive_inner_steps_stay_in_bounds_and_agree_on_every_rank(data_dir: Path) -> None:
    base = overlapped_config()
    config = replace(
        base,
        outer=replace(base.outer, adaptive_inner_steps=True, min_inner_steps=2, max_inner_steps=6),
        warmup_round=False,  # the preset plans its rounds; adaptive H decides them instead
    )
    records = run(config, data_dir).records
    steps = [r.inner_steps for r in records]
    assert steps[0] == 4 and all(2 <= h <= 6 for h in steps), steps
    # Every cluster ran the same H (one decision from gathered timings) and the data cursor
    # advanced by exactly the H of each step.
    cursor = 0
    for record in records:
        assert {(d.first_inner_step, d.inner_steps) for d in record.data_ranges} == {
            (cursor, record.inner_steps)
        }
        cursor += record.inner_steps
