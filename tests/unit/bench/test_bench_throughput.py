"""``veritrain bench throughput`` as a user runs it (typer's runner over the real command)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from veritrain.bench.device_peak import bounded_peak, datasheet_tflops
from veritrain.cli.main import app
from veritrain.errors import BenchError

runner = CliRunner()
SMALL_RUN = [
    "bench",
    "throughput",
    "--preset",
    "tiny",
    "--micro-batches",
    "2",
    "--micro-batch-size",
    "2",
    "--steps",
    "1",
    "--threads",
    "1",
    "--json",
]


@pytest.mark.parametrize(
    "extra", [[], ["--precision", "bf16", "--activation-checkpointing"]], ids=["fp32", "bf16-ckpt"]
)
def test_reports_tokens_per_second_mfu_and_each_stages_peak_memory(extra: list[str]) -> None:
    result = runner.invoke(app, [*SMALL_RUN, *extra])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["tokens_per_second"] > 0 and 0 < report["mfu"] < 1
    assert report["flops_per_token"] == (8 if extra else 6) * report["parameters"]
    assert [s["stage"] for s in report["stages"]] == [0, 1]
    # Each stage holds at least its weights, gradients and AdamW moments (16 B per parameter).
    assert all(s["peak_bytes"] > 16 * report["parameters"] / 2 * 0.5 for s in report["stages"])
    assert report["peak_memory_bytes"] == max(s["peak_bytes"] for s in report["stages"])
    assert all(0.85 <= s["planned_over_measured"] <= 1.15 for s in report["stages"])


def test_commitments_are_timed_apart_and_slow_the_step_down() -> None:
    """The audit's cost as the trainer pays it: each inner step's digest and fingerprint."""
    result = runner.invoke(app, [*SMALL_RUN, "--commitments"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["commitment_seconds_per_step"] > 0
    assert all(s["commitment_seconds_per_step"] > 0 for s in report["stages"])
    assert report["tokens_per_second_with_commitments"] < report["tokens_per_second"]
    without = json.loads(runner.invoke(app, SMALL_RUN).stdout)
    assert without["commitment_seconds_per_step"] == 0
    assert without["tokens_per_second_with_commitments"] == without["tokens_per_second"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_peak_memory_comes_from_the_caching_allocator() -> None:
    result = runner.invoke(app, [*SMALL_RUN, "--device", "cuda", "--precision", "bf16"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["tokens_per_second"] > 0 and report["peak_memory_bytes"] > 0


def test_mfu_never_exceeds_one_whatever_the_peak() -> None:
    # A peak below what the step achieved is no peak: a given one is refused...
    refused = runner.invoke(app, [*SMALL_RUN, "--peak-tflops", "0.000001"])
    assert refused.exit_code != 0
    assert isinstance(refused.exception, BenchError)  # the CLI prints it as one line
    assert str(refused.exception).endswith("that is no peak (MFU would exceed 100%)")
    # ... and a found one (a product too small to fill the device: MFU 362% on an H200 at
    # 1024²) gives way to the step's own rate.
    peak, source = bounded_peak(47.0, "measured bf16 1024² matmul rate", 190.0)
    assert (peak, source) == (
        190.0,
        "the step's own rate (measured bf16 1024² matmul rate: 47 TFLOP/s, below it)",
    )
    assert bounded_peak(989.5, "datasheet", 190.0) == (989.5, "datasheet")


def test_a_gpus_peak_is_its_datasheets_dense_rate() -> None:
    assert datasheet_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.5
    assert datasheet_tflops("NVIDIA H200", "bf16") == 989.5
    assert datasheet_tflops("NVIDIA H100 PCIe", "bf16") == 756.5
    assert datasheet_tflops("NVIDIA A100-SXM4-80GB", "bf16") == 312.0
    assert datasheet_tflops("NVIDIA A100-SXM4-80GB", "fp32") == 19.5
    assert datasheet_tflops("NVIDIA L40S", "bf16") == 366.5  # not L4's
    assert datasheet_tflops("NVIDIA GeForce RTX 4090", "bf16") is None  # measured instead
