"""The inner step's gradient norm and clipping: one device-side reduction, the same bits as the
host-side sum it replaced."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from trainer.config import InnerConfig
from trainer.model import ModelConfig, build_stage, language_model_loss
from trainer.runtime.inner import InnerOptimizer, clip_to_norm, square_sum


@pytest.fixture
def one_rank_group(tmp_path: Path) -> Iterator[dist.ProcessGroup]:
    """A real gloo world of one process (the stage's pipeline group at S = 1)."""
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        group = dist.new_group([0])
        assert group is not None
        yield group
    finally:
        dist.destroy_process_group()


def _host_norm(grads: list[torch.Tensor]) -> float:
    """The norm as the inner loop computed it before: one float read back per tensor."""
    total = 0.0
    for g in grads:
        total += float(g.double().pow(2).sum())
    return math.sqrt(total)


def test_global_norm_is_the_host_sum_bit_for_bit_and_clips_the_same(
    one_rank_group: dist.ProcessGroup,
) -> None:
    model = ModelConfig(
        num_hidden_layers=2,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=2,
        num_key_value_heads=2,
        context=16,
    )
    stage = build_stage(model, stage=0, n_stages=1, seed=3)
    inner = InnerOptimizer(
        stage,
        InnerConfig(grad_clip=1e-3),
        planned_steps=10,
        pipeline=one_rank_group,
        embedding=None,
        device=torch.device("cpu"),
    )
    inner.zero_grad()
    tokens = torch.randint(0, model.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    language_model_loss(stage(tokens[:, :-1]), tokens[:, 1:]).backward()  # type: ignore[no-untyped-call]
    grads = [p.grad.clone() for _, p in inner.named if p.grad is not None]

    norm = inner._global_norm()
    assert norm.dtype == torch.float64 and norm.dim() == 0
    assert float(norm) == _host_norm(grads)  # exact equality: the same additions in the same order

    # Clipping by the device tensor gives the bits clipping by the host float gave.
    by_tensor = [g.clone() for g in grads]
    by_float = [g.clone() for g in grads]
    clip_to_norm(by_tensor, norm, 1e-3)
    clip_to_norm(by_float, _host_norm(grads), 1e-3)
    assert all(torch.equal(a, b) for a, b in zip(by_tensor, by_float, strict=True))
    assert not torch.equal(by_tensor[0], grads[0])  # the norm is far above 1e-3: it clipped

    # Below the threshold the gradients are left bit for bit as they were.
    unclipped = [g.clone() for g in grads]
    clip_to_norm(unclipped, norm, float(norm) * 2)
    assert all(torch.equal(a, b) for a, b in zip(unclipped, grads, strict=True))


def test_square_sum_accumulates_in_float64_on_the_given_device() -> None:
    tensors = [torch.full((3,), 0.1, dtype=torch.float32), torch.full((2, 2), 3.0)]
    total = square_sum(tensors, torch.device("cpu"))
    assert total.dtype == torch.float64
    expected = 0.0 + float(torch.full((3,), 0.1).double().pow(2).sum()) + 36.0
    assert float(total) == expected
