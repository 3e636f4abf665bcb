"""Rank layout (DESIGN.md §6) and the testing-only poison hook."""

from __future__ import annotations

import pytest
import torch

from records.fields import Fields
from records.genesis import ModelSummary
from records.genesis import Topology as RunTopology
from trainer.config import PoisonForTesting
from trainer.errors import ConfigError
from trainer.model import model_summary
from trainer.presets import run_preset
from trainer.runtime.poison import poison_local
from trainer.runtime.topology import Topology


def test_a_launch_numbers_its_processes_cluster_by_cluster() -> None:
    topology = Topology.full(clusters=3, stages=2)
    assert topology.processes == 6
    assert [topology.place(i) for i in range(6)] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert topology.global_rank(2, 1) == 5  # names a process in seeds: cluster * stages + stage
    recorded = topology.recorded(present=(0, 1, 2), backend="gloo", device="cpu")
    assert recorded.world_size == 6  # processes over all clusters, each its own world


def test_one_cluster_alone_is_numbered_from_zero() -> None:
    topology = Topology(clusters=3, stages=2, present=(2,))
    assert topology.processes == 2
    assert [topology.place(i) for i in range(2)] == [(2, 0), (2, 1)]
    with pytest.raises(ConfigError, match="below 3"):
        Topology(clusters=3, stages=2, present=(3,))


def test_scale_poison_multiplies_the_pseudo_gradient() -> None:
    start = [torch.ones(3, 2), torch.zeros(4)]
    local = [torch.full((3, 2), 0.9), torch.full((4,), 0.1)]
    poison_local(
        local, start, PoisonForTesting(cluster=0, step=0, kind="scale", factor=100.0), seed=0
    )
    torch.testing.assert_close(start[0] - local[0], torch.full((3, 2), 10.0))
    torch.testing.assert_close(start[1] - local[1], torch.full((4,), -10.0))


def test_noise_poison_replaces_the_pseudo_gradient_with_large_noise() -> None:
    g = torch.Generator().manual_seed(0)
    start = [torch.randn(64, 64, generator=g)]
    honest = [start[0] - 0.01 * torch.randn(64, 64, generator=g)]
    local = [honest[0].clone()]
    poison_local(
        local, start, PoisonForTesting(cluster=0, step=0, kind="noise", factor=100.0), seed=0
    )
    delta, honest_delta = start[0] - local[0], start[0] - honest[0]
    assert float(delta.norm()) == pytest.approx(100 * float(honest_delta.norm()), rel=0.05)
    cosine = float((delta * honest_delta).sum() / (delta.norm() * honest_delta.norm()))
    assert abs(cosine) < 0.1  # unrelated to the honest direction


def test_the_trainer_reports_topology_and_model_in_the_genesis_own_types() -> None:
    """What the trainer hands the recorder is what the genesis records and what a verifier
    reads back: no dict literal to parse on the way."""
    topology = Topology.full(clusters=2, stages=2, data_parallel=2)
    recorded = topology.recorded(present=(0, 1), backend="gloo", device="cpu")
    assert isinstance(recorded, RunTopology)
    read = RunTopology.read(Fields(recorded.to_payload(), where="genesis", path="topology"))
    assert read == recorded
    assert (read.world_size, read.data_parallel, read.present) == (8, 2, (0, 1))

    model = run_preset("tiny").model
    summary = model_summary(model, 2)
    assert isinstance(summary, ModelSummary)
    assert ModelSummary.read(Fields(summary.to_payload(), where="genesis", path="model")) == summary
    assert summary.stage_blocks == ((0, 1), (2, 3))
    assert summary.parameter_count == model.parameter_count()
