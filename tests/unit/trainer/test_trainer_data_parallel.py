"""Data parallelism inside a cluster (trainer/runtime/data_parallel.py, topology.py): the rank
layout, the replicas' rows of a batch, and a gradient average every replica gets bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from unit.trainer.gloo_ranks import run_gloo_ranks

from trainer.config import TrainConfig
from trainer.errors import ConfigError
from trainer.runtime.data_parallel import average_gradients, ordered_tensor_sum, replica_rows
from trainer.runtime.exchange import join_slices, payload_slice, shard_length
from trainer.runtime.topology import Topology

REPLICAS = 2


def test_a_cluster_runs_stages_times_replicas_processes_replica_by_replica() -> None:
    topology = Topology.full(clusters=2, stages=2, data_parallel=2)
    assert topology.processes == 8
    assert [topology.place_replica(i) for i in range(4)] == [
        (0, 0, 0),
        (0, 1, 0),
        (0, 0, 1),
        (0, 1, 1),
    ]
    assert topology.place(5) == (1, 1)
    assert topology.cluster_rank(stage=1, replica=1) == 3
    assert topology.global_rank(1, 1, 1) == 7
    described = topology.recorded(present=(0, 1), backend="gloo", device="cpu").to_payload()
    assert described["world_size"] == 8 and described["data_parallel"] == 2
    one = Topology.full(clusters=2, stages=2).recorded(present=(0, 1), backend="gloo", device="cpu")
    assert "data_parallel" not in one.to_payload()  # D = 1 records as before


def test_the_replicas_rows_are_disjoint_in_order_and_cover_the_batch() -> None:
    inputs = torch.arange(8 * 3).reshape(8, 3)
    targets = inputs + 100
    shares = [replica_rows(inputs, targets, replica=d, replicas=4) for d in range(4)]
    assert torch.equal(torch.cat([x for x, _ in shares]), inputs)
    assert torch.equal(torch.cat([y for _, y in shares]), targets)
    assert all(x.shape[0] == 2 for x, _ in shares)
    with pytest.raises(ConfigError, match="multiple of 3"):
        replica_rows(inputs, targets, replica=0, replicas=3)


def test_the_configuration_needs_micro_batches_that_split_over_the_replicas() -> None:
    with pytest.raises(ConfigError, match="multiple of data_parallel"):
        TrainConfig(micro_batch_size=3, data_parallel=2)
    with pytest.raises(ConfigError, match="needs an outer method"):
        TrainConfig(method="allreduce", data_parallel=2)
    assert "data_parallel" not in TrainConfig().to_dict()  # D = 1 keeps the digests of earlier runs
    assert TrainConfig.from_dict(TrainConfig(data_parallel=2).to_dict()).data_parallel == 2


def _grads(rank: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(rank)
    # Values of very different magnitude: a different summation order gives different bits.
    return [torch.randn(5, 7, generator=g) * 1e8, torch.randn(11, generator=g) * 1e-8]


def _replica() -> tuple[int, list[Any]]:
    rank = dist.get_rank()
    params = [torch.zeros_like(g, requires_grad=True) for g in _grads(rank)]
    for p, g in zip(params, _grads(rank), strict=True):
        p.grad = g.clone()
    world = dist.group.WORLD
    assert world is not None
    sent = average_gradients(params, world)
    return sent, [p.grad.numpy().copy() for p in params if p.grad is not None]


def test_replicas_average_gradients_in_replica_order_identically(tmp_path: Path) -> None:
    got = run_gloo_ranks(_replica, REPLICAS, tmp_path)

    expected = [
        ordered_tensor_sum([_grads(r)[i] for r in range(REPLICAS)]) / REPLICAS for i in range(2)
    ]
    for rank in range(REPLICAS):
        sent, grads = got[rank]
        assert sent == (5 * 7 + 11) * 4  # one float32 copy of the stage's gradients
        for have, want in zip(grads, expected, strict=True):
            assert torch.equal(torch.from_numpy(have), want)  # bit for bit, on every replica


@pytest.mark.parametrize("length", [12, 13, 1])
def test_a_payload_splits_into_equal_slices_that_join_back(length: int) -> None:
    payload = torch.arange(length, dtype=torch.uint8) + 1
    slices = [payload_slice(payload, d, 3) for d in range(3)]
    assert {s.numel() for s in slices} == {shard_length(length, 3)}  # equal: one all-gather
    assert sum(s.numel() for s in slices) - length < 3  # at most count - 1 bytes of padding
    assert torch.equal(join_slices(slices, length), payload)
    assert shard_length(460800, 2) == 230400  # tiny's stage 0, fp32: each of 2 replicas sends half
