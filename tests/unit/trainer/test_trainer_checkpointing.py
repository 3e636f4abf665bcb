"""Activation checkpointing: recomputing each layer gives the same loss and gradients, bit for
bit."""

from __future__ import annotations

import pytest
import torch

from trainer.config import TrainConfig
from trainer.model import ModelConfig, build_stage, language_model_loss
from trainer.precision import autocast

MODEL = ModelConfig(
    num_hidden_layers=3,
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    context=16,
)


def _loss_and_grads(
    checkpointing: bool, precision: str
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    stage = build_stage(MODEL, stage=0, n_stages=1, seed=5, activation_checkpointing=checkpointing)
    tokens = torch.randint(0, MODEL.vocab_size, (2, 17), generator=torch.Generator().manual_seed(1))
    with autocast(precision, torch.device("cpu")):  # type: ignore[arg-type]
        loss = language_model_loss(stage(tokens[:, :-1]), tokens[:, 1:])
    loss.backward()  # type: ignore[no-untyped-call]
    return loss.detach(), {
        n: p.grad.clone() for n, p in stage.named_parameters() if p.grad is not None
    }


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_recomputation_gives_the_same_loss_and_gradients_bit_for_bit(precision: str) -> None:
    plain_loss, plain = _loss_and_grads(False, precision)
    loss, grads = _loss_and_grads(True, precision)
    assert torch.equal(loss, plain_loss)
    assert sorted(grads) == sorted(plain) and len(grads) > 10
    for name, grad in grads.items():
        assert torch.equal(grad, plain[name]), name


def test_recomputation_keeps_less_for_the_backward_pass() -> None:
    """What autograd holds after the forward: with recomputation only each layer's input."""

    def saved_bytes(checkpointing: bool) -> int:
        stage = build_stage(
            MODEL, stage=0, n_stages=1, seed=5, activation_checkpointing=checkpointing
        )
        tokens = torch.randint(
            0, MODEL.vocab_size, (4, 16), generator=torch.Generator().manual_seed(1)
        )
        total = 0

        def pack(t: torch.Tensor) -> torch.Tensor:
            nonlocal total
            if not isinstance(t, torch.nn.Parameter):
                total += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            stage(tokens)
        return total

    assert saved_bytes(True) < saved_bytes(False) / 2


def test_the_option_is_recorded_only_when_on() -> None:
    assert "activation_checkpointing" not in TrainConfig().to_dict()  # older digests stay valid
    on = TrainConfig(activation_checkpointing=True)
    assert on.to_dict()["activation_checkpointing"] is True
    assert TrainConfig.from_dict(on.to_dict()) == on
    assert TrainConfig.from_dict(TrainConfig().to_dict()).activation_checkpointing is False
