"""``veritrain bench convergence --arm/--device``: which configurations a study trains, where."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from unit.veritrain_in_process import run_veritrain

from trainer.presets import run_preset
from veritrain.bench.convergence_study import (
    LEVERS,
    PREVIOUS_TINY,
    ConvergenceStudyConfig,
    study_arms,
)
from veritrain.errors import BenchError


def test_an_arm_filter_keeps_allreduce_and_the_named_arms_in_order() -> None:
    arms = study_arms(run_preset("tiny"), levers=False, only=("blocking", "diloco"))
    assert [arm.name for arm in arms] == ["allreduce", "diloco", "blocking"]


def test_levers_change_the_tiny_study_reference_at_tiny_and_the_presets_own_elsewhere() -> None:
    tiny = {arm.name: arm for arm in study_arms(run_preset("tiny"), levers=True)}
    assert tiny["previous"].outer == PREVIOUS_TINY
    qwen = run_preset("qwen2-12m")
    arms = {arm.name: arm for arm in study_arms(qwen, levers=False, only=("lr0.7-m0.5-warm-up",))}
    warm_up = arms["lr0.7-m0.5-warm-up"].outer
    assert warm_up is not None
    # qwen2-12m's own int4 factors and bf16 small tensors, with only the lever's change: its
    # outer step before the short overlap, so a study there still compares the two.
    assert qwen.outer.apply_delay == 3 and warm_up.apply_delay is None
    assert warm_up == replace(
        qwen.outer, outer_lr=0.7, outer_momentum=0.5, apply_delay=None, sync_rounds=1
    )
    assert (warm_up.bits, warm_up.dense_bits) == (qwen.outer.bits, qwen.outer.dense_bits)


def test_the_short_overlap_levers_rebuild_tiny_from_the_study_reference() -> None:
    """At tiny the two short-overlap levers, one change each to the reference, end at the
    preset's DiLoCoX but for its outer lr (the preset's since the inner β₁ was tuned; the levers
    keep the 0.7 they were measured at); at another preset they apply that outer step to its own."""
    tiny = run_preset("tiny")
    arms = {arm.name: arm.outer for arm in study_arms(tiny, levers=True)}
    assert arms["dilocox"] == replace(tiny.outer, kind="dilocox")
    assert arms["short-overlap-int2"].outer_lr == 0.7
    assert replace(arms["short-overlap-int2"], outer_lr=tiny.outer.outer_lr) == arms["dilocox"]
    qwen = run_preset("qwen2-12m")
    short = {arm.name: arm.outer for arm in study_arms(qwen, levers=True)}["short-overlap"]
    assert short == replace(qwen.outer, outer_lr=0.7, outer_momentum=0.5, apply_delay=3)


def test_every_lever_builds_at_every_cpu_preset() -> None:
    """A lever is one change to the preset's own DiLoCoX, and it must make a valid one: the
    adaptive-rank lever at tiny-wide (rank 72) keeps its bound above the preset's rank."""
    for name in ("tiny", "tiny-wide", "small", "qwen2-12m"):
        arms = study_arms(run_preset(name), levers=True)
        assert len(arms) == 3 + len(LEVERS), name


def test_an_unknown_arm_is_named_in_the_error() -> None:
    with pytest.raises(BenchError, match="got no-such-lever"):
        ConvergenceStudyConfig(arms=("diloco", "no-such-lever"))


def test_a_device_other_than_cpu_or_cuda_is_refused() -> None:
    with pytest.raises(BenchError, match="--device cpu or cuda"):
        ConvergenceStudyConfig(device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(BenchError, match="no CUDA device"):
            ConvergenceStudyConfig(device="cuda")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"rounds": (10, 5), "outer_steps": 2}, "expected --rounds or --outer-steps/--inner-steps"),
        ({"rounds": (10, 0)}, "expected every round >= 1 inner step, got [10, 0]"),
        ({"inner_lr": 0.0}, "expected --inner-lr > 0, got 0.0"),
        ({"warmup_steps": -1}, "expected --warmup-steps >= 0, got -1"),
        ({"beta1": 1.0}, "expected --beta1 in [0, 1), got 1.0"),
    ],
)
def test_a_schedule_the_study_cannot_train_is_refused_by_name(
    settings: dict[str, object], message: str
) -> None:
    with pytest.raises(BenchError, match=re.escape(message)):
        ConvergenceStudyConfig(**settings)  # type: ignore[arg-type]


def test_rounds_set_t_and_the_token_budget() -> None:
    schedule = ConvergenceStudyConfig(rounds=(100, 15, 15, 14, 14, 14, 14, 14)).schedule
    assert (schedule.outer_steps, schedule.total_steps) == (8, 200)


def test_rounds_that_are_not_numbers_are_refused_by_the_cli(tmp_path: Path) -> None:
    completed = run_veritrain(["bench", "convergence", "--rounds", "10,x"], cwd=tmp_path)
    assert completed.returncode == 2
    words = " ".join(completed.stderr.replace("│", " ").split())  # typer's box wraps the line
    assert "expected inner step counts separated by commas, got '10,x'" in words
