"""The small model and corpus the research simulations' tests train on."""

from __future__ import annotations

import torch

from trainer.model import ModelConfig

TINY = ModelConfig(
    vocab_size=256,
    context=16,
    num_hidden_layers=1,
    hidden_size=32,
    intermediate_size=96,
    num_attention_heads=2,
    num_key_value_heads=2,
)


def corpus() -> torch.Tensor:
    """A few hundred bytes of Python, repeated: enough for a 16-token context to learn from."""
    text = b"def add(a, b):\n    return a + b\n\nclass Point:\n    x: int\n    y: int\n" * 40
    return torch.frombuffer(bytearray(text), dtype=torch.uint8).clone()
