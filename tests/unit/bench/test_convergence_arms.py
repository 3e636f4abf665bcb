"""``veritrain bench convergence --arm/--device``: which configurations a study trains, where."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from trainer.presets import run_preset
from veritrain.bench.convergence_study import (
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
    # qwen2-12m's own int4 factors and bf16 small tensors, with only the lever's change.
    assert warm_up == replace(qwen.outer, outer_lr=0.7, outer_momentum=0.5, sync_rounds=1)
    assert (warm_up.bits, warm_up.dense_bits) == (qwen.outer.bits, qwen.outer.dense_bits)


def test_an_unknown_arm_is_named_in_the_error() -> None:
    with pytest.raises(BenchError, match="got no-such-lever"):
        ConvergenceStudyConfig(arms=("diloco", "no-such-lever"))


def test_a_device_other_than_cpu_or_cuda_is_refused() -> None:
    with pytest.raises(BenchError, match="--device cpu or cuda"):
        ConvergenceStudyConfig(device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(BenchError, match="no CUDA device"):
            ConvergenceStudyConfig(device="cuda")
