"""``veritrain bench throughput`` as a user runs it (typer's runner over the real command)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from veritrain.cli.main import app

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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_peak_memory_comes_from_the_caching_allocator() -> None:
    result = runner.invoke(app, [*SMALL_RUN, "--device", "cuda", "--precision", "bf16"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["tokens_per_second"] > 0 and report["peak_memory_bytes"] > 0
