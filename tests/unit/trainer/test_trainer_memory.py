"""Measured peak memory of a stage's inner step, and the planner's estimate of it."""

from __future__ import annotations

import pytest
import torch

from trainer.memory import PeakMemory, measure_stage_step
from trainer.model import ModelConfig
from trainer.planner import Placement, Precision, Workload, plan

MODEL = ModelConfig(
    num_hidden_layers=2,
    hidden_size=128,
    intermediate_size=384,
    num_attention_heads=2,
    num_key_value_heads=2,
    context=64,
    vocab_size=1024,
)


def test_peak_memory_counts_tensor_bytes_alive_together() -> None:
    with PeakMemory(torch.device("cpu")) as peak:
        a = torch.ones(1_000_000)  # 4 MB
        b = torch.ones(2_000_000)  # 8 MB: 12 MB alive
        del a, b
        c = torch.ones(500_000)  # 2 MB after both were freed
        del c
    assert 12_000_000 <= peak.bytes < 12_100_000


def test_checkpointing_lowers_the_measured_peak() -> None:
    plain, recomputed = (
        measure_stage_step(
            MODEL,
            stage=0,
            stages=2,
            micro_batches=2,
            micro_batch_size=4,
            activation_checkpointing=on,
        )
        for on in (False, True)
    )
    assert recomputed.peak_bytes < 0.9 * plain.peak_bytes


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("recompute", [False, True], ids=["keep", "recompute"])
def test_the_planner_is_within_15_percent_of_the_measured_peak(
    precision: str, recompute: bool
) -> None:
    """Issue 15 §4: at CPU scale the planner's per-stage estimate (held="trainer": what this
    trainer holds) agrees with the measured peak of each stage's inner step."""
    estimate = plan(
        MODEL,
        placement=Placement(clusters=2, stages=2, data_parallel=1),
        workload=Workload(
            micro_batch_size=4, sequence_length=MODEL.context, micro_batches=2, recompute=recompute
        ),
        precision=Precision.of_trainer(precision),
        held="trainer",
    )
    for stage in (0, 1):
        measured = measure_stage_step(
            MODEL,
            stage=stage,
            stages=2,
            micro_batches=2,
            micro_batch_size=4,
            precision=precision,
            activation_checkpointing=recompute,  # type: ignore[arg-type]
        )
        ratio = estimate.stages[stage].inner_step_bytes / measured.peak_bytes
        assert 0.85 <= ratio <= 1.15, (stage, ratio)
