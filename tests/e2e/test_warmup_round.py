"""A run whose first round spans the inner warm-up (``TrainConfig.warmup_round``): it records
rounds of the planned lengths, verifies, re-executes bit for bit, and a step whose recorded H is
not the genesis's plan fails verification."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from e2e.forger import Forger, Payloads
from e2e.recorded_runs import copy_run, with_light_extras, with_short_warm_up

from trainer.config import with_overrides
from trainer.presets import run_preset
from veritrain.audit.reproduce import reproduce_step
from veritrain.audit.verify import Report, verify_run
from veritrain.record.training import train_recorded
from veritrain.settings import Settings, load_settings
from veritrain.sources import DirectSource
from veritrain.sources.recorded_run import RecordedRun

RUN_ID = "warmup-round"
ROUNDS = (6, 3, 3)
"""T = 3 x H = 4 with a 10-step warm-up: the first round takes min(10, 12 / 2) = 6 steps, the
other two share the remaining 6."""


@pytest.fixture(scope="module")
def warmup_round_run(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    settings = load_settings(data_dir=tmp_path_factory.mktemp("warmup-round") / "veritrain-data")
    config = replace(
        with_light_extras(
            with_short_warm_up(
                with_overrides(run_preset("tiny"), run_id=RUN_ID, outer_steps=3, inner_steps=4)
            )
        ),
        warmup_round=True,
    )
    assert config.round_inner_steps() == ROUNDS
    train_recorded(settings, config, quiet=True)
    return settings


def verify(settings: Settings) -> Report:
    with DirectSource(settings) as source:
        return verify_run(source, RUN_ID)


def test_the_rounds_have_the_planned_lengths_and_the_run_verifies(
    warmup_round_run: Settings,
) -> None:
    with DirectSource(warmup_round_run) as source:
        steps = [step for _, step in RecordedRun.load(source, RUN_ID).outer_steps]
    assert [s.inner_steps for s in steps] == list(ROUNDS)
    # Tokens follow the rounds: the first holds half of the run's, the others a quarter each.
    assert [s.tokens.step for s in steps] == [2 * steps[1].tokens.step] + [steps[1].tokens.step] * 2
    assert steps[-1].tokens.total == 2 * steps[0].tokens.step
    report = verify(warmup_round_run)
    assert report.ok, report.render()


@pytest.mark.parametrize("step", [0, 2])
def test_a_long_and_a_short_round_reproduce_bitwise(step: int, warmup_round_run: Settings) -> None:
    with DirectSource(warmup_round_run) as source:
        comparison = reproduce_step(source, RUN_ID, step)
    assert comparison.ok, comparison.render()
    assert comparison.mode == "bitwise"


def test_a_round_of_another_length_than_planned_fails_verify(
    warmup_round_run: Settings, tmp_path: Path
) -> None:
    """An operator re-signs the log with step 1 claiming H = 4 (the uniform plan's), not 3."""
    forged = copy_run(warmup_round_run, tmp_path / "veritrain-data")

    def edit(payloads: Payloads) -> Payloads:
        for kind, payload in payloads:
            if kind == "outer_step" and payload["step"] == 1:
                payload["inner_steps"] = 4
        return payloads

    Forger(forged, RUN_ID).rewrite(edit)
    report = verify(forged)
    failures = [f.message for r in report.results.values() for f in r.failures]
    assert any(
        "inner steps: expected H = 3 (the genesis's plan for step 1" in m for m in failures
    ), report.render()
