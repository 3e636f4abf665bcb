"""Rank layout (DESIGN.md §6) and the testing-only poison hook."""

from __future__ import annotations

import pytest
import torch

from trainer.config import PoisonForTesting
from trainer.errors import ConfigError
from trainer.runtime.poison import poison_local
from trainer.runtime.topology import Topology


def test_a_launch_numbers_its_processes_cluster_by_cluster() -> None:
    topology = Topology.full(clusters=3, stages=2)
    assert topology.processes == 6
    assert [topology.place(i) for i in range(6)] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert topology.global_rank(2, 1) == 5  # names a process in seeds: cluster * stages + stage
    assert topology.to_dict()["world_size"] == 6  # processes over all clusters, each its own world


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
