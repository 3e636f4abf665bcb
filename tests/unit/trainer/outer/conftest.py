"""Fixtures for the outer-algorithm tests (helpers live in outer_helpers.py)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def named_params() -> list[tuple[str, torch.Tensor]]:
    """θ₀ of a small stage: two matrices worth compressing, a small one and a bias."""
    g = torch.Generator().manual_seed(1234)
    return [
        ("blocks.0.mlp.fc.weight", torch.randn(96, 48, generator=g) * 0.02),
        ("blocks.0.mlp.fc.bias", torch.zeros(96)),
        ("blocks.0.attn.qkv.weight", torch.randn(72, 48, generator=g) * 0.02),
        ("blocks.0.ln_1.weight", torch.ones(48)),
        ("blocks.0.tiny.weight", torch.randn(8, 6, generator=g) * 0.02),
    ]
