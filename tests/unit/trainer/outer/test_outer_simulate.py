"""The single-process simulator and the byte accounting the benchmarks reuse."""

from __future__ import annotations

import pytest
import torch

from trainer.errors import ConfigError
from trainer.model import ModelConfig
from trainer.outer import OuterConfig
from trainer.outer.accounting import allgather_bytes_per_outer_step, allreduce_bytes_per_outer_step
from trainer.outer.research import make_batches, make_eval_batches
from trainer.outer.simulate import SimulationConfig, simulate

TINY = ModelConfig(
    vocab_size=256, context=16, num_hidden_layers=1, hidden_size=32, intermediate_size=96,
    num_attention_heads=2, num_key_value_heads=2,
)


def corpus() -> torch.Tensor:
    text = b"def add(a, b):\n    return a + b\n\nclass Point:\n    x: int\n    y: int\n" * 40
    return torch.frombuffer(bytearray(text), dtype=torch.uint8).clone()


def run(method: str, outer: OuterConfig | None = None, **overrides):
    tokens = corpus()
    config = SimulationConfig(
        model=TINY, method=method, outer=outer or OuterConfig(kind="diloco"), inner_steps=4,
        total_steps=8, warmup_steps=2, eval_points=2, **overrides,
    )
    batches = make_batches(tokens, context=TINY.context, batch=2, n_clusters=config.n_clusters, seed=0)
    return simulate(config, batches=batches, eval_batches=make_eval_batches(tokens, context=16, sequences=4))


def test_ring_allreduce_and_allgather_bytes_follow_the_documented_formulas():
    assert allreduce_bytes_per_outer_step(parameters=1000, n_clusters=2, inner_steps=25) == 1.0 * 4 * 1000 * 25
    assert allreduce_bytes_per_outer_step(parameters=1000, n_clusters=4, inner_steps=1) == 1.5 * 4 * 1000
    assert allgather_bytes_per_outer_step(payload_bytes=300, n_clusters=4) == 900
    with pytest.raises(ConfigError, match="n_clusters"):
        allgather_bytes_per_outer_step(payload_bytes=1, n_clusters=0)


def test_every_method_trains_and_counts_its_bytes():
    allreduce = run("allreduce")
    diloco = run("diloco")
    dilocox = run("dilocox", OuterConfig(kind="dilocox", rank=2, min_rank=1, max_rank=4, min_compress_dim=16))
    params = allreduce.parameters
    assert allreduce.bytes_per_cluster == 2 * allreduce_bytes_per_outer_step(parameters=params, n_clusters=2, inner_steps=4)
    assert diloco.bytes_per_cluster == 2 * 4 * params  # two rounds of one fp32 payload
    assert dilocox.bytes_per_cluster == sum(dilocox.payload_bytes) < diloco.bytes_per_cluster / 4
    for result in (allreduce, diloco, dilocox):
        assert not result.diverged
        # Below the uniform-prediction loss ln 256 ≈ 5.545 and improving between the two evaluations.
        assert result.curve[-1][1] < min(result.curve[0][1], 5.45)
        assert result.allreduce_bytes_per_cluster == allreduce.bytes_per_cluster


def test_simulation_is_deterministic():
    config = OuterConfig(kind="dilocox", rank=2, min_rank=1, max_rank=4, min_compress_dim=16)
    assert run("dilocox", config).curve == run("dilocox", config).curve


def test_method_and_outer_kind_must_agree():
    with pytest.raises(ConfigError, match="must match method"):
        SimulationConfig(model=TINY, method="dilocox", outer=OuterConfig(kind="diloco"))
