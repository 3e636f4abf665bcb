"""A recorded DiLoCoX run with the short overlap (``OuterConfig.apply_delay``: round t's exchange
applied τ inner steps into round t+1; the real multi-process trainer over torchft into a real
ledger and store): the genesis records τ, ``veritrain verify`` recomputes every verdict and the
weights from the signed payloads, and ``veritrain reproduce`` re-executes a step whose apply
landed mid-round, whole and one cluster alone, bitwise."""

from __future__ import annotations

from dataclasses import replace

import pytest
from e2e.recorded_runs import small_run_config

from trainer.config import with_overrides
from veritrain.audit.reproduce import reproduce_step
from veritrain.audit.verify import verify_run
from veritrain.record.training import train_recorded
from veritrain.settings import Settings, load_settings
from veritrain.sources import DirectSource
from veritrain.sources.recorded_run import RecordedRun

RUN_ID = "short-overlap"
DELAY = 3
"""τ: the preset's rounds at T = 3, H = 8 are 12, 6, 6 (round 0 is the warm-up)."""


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    settings = load_settings(data_dir=tmp_path_factory.mktemp("short") / "veritrain-data")
    base = with_overrides(small_run_config(RUN_ID, outer_steps=3), method="dilocox")
    config = replace(base, outer=replace(base.outer, apply_delay=DELAY))
    train_recorded(settings, config, quiet=True)
    return settings


def test_the_genesis_records_the_delay_and_step_2_applies_round_1(short_run: Settings) -> None:
    with DirectSource(short_run) as source:
        run = RecordedRun.load(source, RUN_ID)
        assert run.genesis.hyperparameters["outer"]["apply_delay"] == DELAY
        assert [[a.round for a in step.applied] for _, step in run.outer_steps] == [[0], [], [1, 2]]


def test_verify_and_reproduce_follow_the_mid_round_apply(short_run: Settings) -> None:
    with DirectSource(short_run) as source:
        report = verify_run(source, RUN_ID, deep=True)
        whole = reproduce_step(source, RUN_ID, 2)
        alone = reproduce_step(source, RUN_ID, 2, cluster=1)
    assert report.ok, report.render()
    assert whole.ok, whole.render()
    assert whole.mode == "bitwise"
    assert alone.ok, alone.render()
