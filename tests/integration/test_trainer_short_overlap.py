"""DiLoCoX with the short overlap (``OuterConfig.apply_delay``; 2 clusters x 2 stages, gloo, CPU):
round t's exchange is applied τ inner steps into round t+1 and every cluster keeps the progress
of those steps. The records read as under the one-step delay (step t+1 applies round t); a run
resumed with an exchange in flight, a re-executed step and a cluster re-executing its step alone
give the recorded bits."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from integration.overlap_runs import STEPS, assert_same_state, overlapped_config, run

from trainer.api import reexecute_outer_step
from trainer.checkpoint_layout import TRAINER_STATE
from trainer.config import TrainConfig
from trainer.errors import ConfigError
from trainer.memory_recorder import MemoryRecording

DELAY = 1
"""τ, below every delayed round's H: the preset's rounds at T = 4, H = 4 are 8, 3, 3, 2."""


def short_overlap_config() -> TrainConfig:
    config = overlapped_config(sync_rounds=1)
    return replace(config, outer=replace(config.outer, apply_delay=DELAY))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("short-overlap-corpus")


@pytest.fixture(scope="module")
def short(data_dir: Path) -> MemoryRecording:
    return run(short_overlap_config(), data_dir)


def test_rounds_are_applied_in_the_next_step_and_the_clusters_keep_their_progress(
    short: MemoryRecording, data_dir: Path
) -> None:
    records = short.records
    assert [[a.round for a in r.applied] for r in records] == [[0], [], [1], [2, 3]]
    pending = [short.state(t).json[TRAINER_STATE]["cursor"]["pending_round"] for t in range(STEPS)]
    assert pending == [None, 1, 2, None]
    # The warm-up step is the one-step delay's; from round 1 on the clusters train differently.
    delayed = run(overlapped_config(sync_rounds=1), data_dir)
    assert records[0].contribution_digests == delayed.records[0].contribution_digests
    assert records[2].contribution_digests != delayed.records[2].contribution_digests
    assert short.records[-1].metrics["eval_loss"] < 5.0  # it learns (ln 256 ≈ 5.55)


def test_resuming_with_an_exchange_in_flight_continues_bitwise(
    short: MemoryRecording, data_dir: Path
) -> None:
    resumed = run(short_overlap_config(), data_dir, resume=short.state(1))
    assert [r.step for r in resumed.records] == [2, 3]
    for step in (2, 3):
        assert_same_state(resumed.state(step), short.state(step))


def test_reexecuting_a_step_reproduces_it_bitwise_whole_and_one_cluster_alone(
    short: MemoryRecording, data_dir: Path
) -> None:
    config = short_overlap_config()
    again = reexecute_outer_step(config, short.state(1), 2, data_dir=data_dir)
    assert_same_state(again.files, short.state(2))
    assert again.record.contribution_digests == short.records[2].contribution_digests
    # One cluster alone applies the round in flight τ steps into its round, as the run did.
    alone = reexecute_outer_step(config, short.state(1), 2, 1, data_dir=data_dir)
    assert alone.contribution_digests == {
        key: digest for key, digest in again.contribution_digests.items() if key[0] == 1
    }


def test_a_round_shorter_than_the_delay_takes_it_before_its_last_step(data_dir: Path) -> None:
    # The preset's rounds at T = 4, H = 4 are 8, 3, 3, 2: with τ = 3 every delayed round applies
    # after H − 1 of its steps. The run trains, and re-executing a step gives its bits.
    config = overlapped_config(sync_rounds=1)
    config = replace(config, outer=replace(config.outer, apply_delay=3))
    late = run(config, data_dir)
    assert [[a.round for a in r.applied] for r in late.records] == [[0], [], [1], [2, 3]]
    again = reexecute_outer_step(config, late.state(2), 3, data_dir=data_dir)
    assert_same_state(again.files, late.state(3))


def test_a_blocking_run_ignores_the_delay_as_it_ignores_the_warm_up() -> None:
    config = overlapped_config(sync_rounds=1)
    blocking = replace(config, outer=replace(config.outer, overlap=False, apply_delay=2))
    assert blocking.outer.delay_in_use is None and not blocking.outer.look_ahead
    assert replace(config, outer=replace(config.outer, apply_delay=2)).outer.delay_in_use == 2
    with pytest.raises(ConfigError, match="apply_delay"):
        replace(config, outer=replace(config.outer, apply_delay=0))
