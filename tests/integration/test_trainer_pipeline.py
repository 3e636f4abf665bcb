"""Pipelined, data-parallel training equals plain single-process PyTorch on the same batches.

The AllReduce baseline over C clusters x S stages must compute what one process computes by
running the whole model on every cluster's batch, averaging the gradients, clipping and taking
the same AdamW step -- within floating-point tolerance (summation order differs: micro-batches,
stage boundaries, the all-reduce).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from trainer.api import assignment_rule, train
from trainer.checkpoint_layout import CheckpointFiles, inner_file, model_file
from trainer.config import TrainConfig, with_overrides
from trainer.data.build import prepare_data
from trainer.data.reader import BatchReader
from trainer.memory_recorder import InMemoryRecorder, MemoryRecording, shared_sink
from trainer.model import TIED_EMBEDDING, TIED_HEAD, CausalLM, language_model_loss
from trainer.presets import run_preset
from trainer.runtime.inner import learning_rate


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pipeline-corpus")


def run(config: TrainConfig, data_dir: Path) -> MemoryRecording:
    with shared_sink() as sink:
        train(config, InMemoryRecorder.factory(sink), data_dir=data_dir, quiet=True)
        return MemoryRecording(sink.items())


def single_process_reference(config: TrainConfig, data_dir: Path) -> dict[str, torch.Tensor]:
    """The same training written as one plain PyTorch loop: no pipelining, no processes."""
    prepared = prepare_data(config.data, data_dir)
    manifest = prepared.manifest
    rule = assignment_rule(config, manifest)
    reader = BatchReader(manifest, rule, prepared.source)
    model = CausalLM(config.model, seed=config.seed)
    params = list(model.parameters())
    inner = config.inner
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": inner.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=inner.lr,
        betas=(inner.beta1, inner.beta2),
        eps=inner.eps,
        foreach=False,
    )
    for step in range(config.planned_inner_steps):
        total = [torch.zeros_like(p) for p in params]
        for cluster in range(config.clusters):
            model.zero_grad()
            inputs, targets = reader.train_batch(cluster, step)
            pieces = zip(
                inputs.chunk(config.micro_batches), targets.chunk(config.micro_batches), strict=True
            )
            loss = sum(language_model_loss(model(x), y) for x, y in pieces) / config.micro_batches
            loss.backward()  # type: ignore[union-attr]
            for acc, p in zip(total, params, strict=True):
                acc.add_(p.grad)  # type: ignore[arg-type]
        norm = math.sqrt(sum(float((g / config.clusters).double().pow(2).sum()) for g in total))
        scale = min(1.0, inner.grad_clip / (norm + 1e-6))
        for p, g in zip(params, total, strict=True):
            p.grad = g / config.clusters * scale
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(inner, step, config.planned_inner_steps)
        optimizer.step()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize(("clusters", "stages"), [(2, 2), (1, 1)], ids=["2x2", "1x1"])
def test_pipelined_allreduce_matches_single_process_training(
    clusters: int, stages: int, data_dir: Path
) -> None:
    config = replace(
        with_overrides(
            run_preset("tiny"),
            method="allreduce",
            clusters=clusters,
            stages=stages,
            outer_steps=2,
            inner_steps=3,
        ),
        eval_batches=1,
    )
    last = run(config, data_dir).state(config.outer_steps - 1)
    expected = single_process_reference(config, data_dir)
    weights = {
        k: v for s in range(stages) for k, v in last.tensor_file(model_file(s, stages)).items()
    }
    assert sorted(weights) == sorted(expected)  # every parameter once, the tied matrix included
    for name, tensor in expected.items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-4, atol=1e-5, msg=name)
    # Training moved the weights by far more than the tolerance above.
    initial = {
        n: p.detach() for n, p in CausalLM(config.model, seed=config.seed).named_parameters()
    }
    assert max(float((expected[n] - initial[n]).abs().max()) for n in expected) > 100 * 1e-5


def test_allreduce_keeps_clusters_and_tied_copies_bit_identical(data_dir: Path) -> None:
    config = with_overrides(run_preset("tiny"), method="allreduce", outer_steps=1, inner_steps=3)
    state: CheckpointFiles = run(config, data_dir).state(0)
    for stage in (0, 1):
        a, b = state.tensor_file(inner_file(0, stage)), state.tensor_file(inner_file(1, stage))
        for key in a:
            if key != "rng.torch":
                assert torch.equal(a[key], b[key]), key
    first, last = state.tensor_file(inner_file(0, 0)), state.tensor_file(inner_file(0, 1))
    for moment in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(first[f"{TIED_EMBEDDING}.{moment}"], last[f"{TIED_HEAD}.{moment}"])


def test_a_single_cluster_single_stage_diloco_run_trains(data_dir: Path) -> None:
    config = replace(
        with_overrides(
            run_preset("tiny"), method="diloco", clusters=1, stages=1, outer_steps=3, inner_steps=4
        ),
        micro_batches=2,
    )
    records = run(config, data_dir).records
    assert [len(r.contribution_digests) for r in records] == [1, 1, 1]
    assert [r.applied[0].round for r in records] == [0, 1, 2]
    assert records[-1].metrics["eval_loss"] < records[0].metrics["eval_loss"]
