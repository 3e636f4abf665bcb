"""A GPT-style decoder: causal self-attention, MLP, tied input/output embeddings.

Written for reading in one sitting (after nanoGPT's model.py) and for splitting into
pipeline stages: the model is a flat sequence of parts -- embedding, blocks, head -- so a
stage is a contiguous slice of that sequence (see :func:`stage_layout`).

Deliberate simplifications: no dropout (determinism and tiny runs need none), pre-LayerNorm,
learned absolute positions, GELU (tanh form). Tied embeddings follow Press & Wolf (2017); when
the first and last pipeline stages differ, each holds a copy of the tied matrix and the
trainer keeps the copies equal (Megatron-LM's approach: sum their gradients).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trainer.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Shape of the decoder."""

    vocab_size: int = 256
    """Tokens in the vocabulary; 256 for the default byte-level tokenizer."""
    context: int = 128
    """Maximum sequence length (learned positions)."""
    n_layer: int = 4
    """Transformer blocks."""
    n_head: int = 4
    """Attention heads per block."""
    d_model: int = 128
    """Residual stream width."""
    d_ff: int = 0
    """MLP hidden width; 0 means 4 * d_model."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context", "n_layer", "n_head", "d_model"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_head:
            raise ConfigError(
                f"ModelConfig.d_model ({self.d_model}) must be divisible by n_head ({self.n_head})"
            )
        if self.d_ff < 0:
            raise ConfigError(f"ModelConfig.d_ff must be >= 0, got {self.d_ff}")

    @property
    def hidden(self) -> int:
        return self.d_ff or 4 * self.d_model

    def parameter_count(self) -> int:
        """Parameters of the whole model with the embedding counted once (tied)."""
        d, f = self.d_model, self.hidden
        block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
        return self.vocab_size * d + self.context * d + self.n_layer * block + 2 * d


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()  # batch, time, channels
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, n_head, T, head_dim)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.d_model, config.hidden)
        self.proj = nn.Linear(config.hidden, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Embedding(nn.Module):
    """Token + position embedding: (B, T) token ids -> (B, T, C)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = nn.Embedding(config.context, config.d_model)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.size(1)
        positions = torch.arange(T, device=idx.device)
        return self.wte(idx) + self.wpe(positions)


class Head(nn.Module):
    """Final LayerNorm and the output projection, whose weight is the (tied) token embedding."""

    def __init__(self, config: ModelConfig, wte: nn.Embedding | None = None) -> None:
        super().__init__()
        self.ln_f = nn.LayerNorm(config.d_model)
        # Owning a separate matrix when the embedding lives on another pipeline stage.
        self.wte = wte if wte is not None else nn.Embedding(config.vocab_size, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.ln_f(x), self.wte.weight)  # (B, T, vocab) logits


class GPT(nn.Module):
    """The whole decoder on one device: embed -> blocks -> head."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = Embedding(config)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.head = Head(config, wte=self.embed.wte)
        init_weights(self, config)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def init_weights(module: nn.Module, config: ModelConfig) -> None:
    """GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 * n_layer)."""
    for name, param in module.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(param)
        elif "ln" in name.split(".")[-2]:
            nn.init.ones_(param)
        elif name.endswith("proj.weight"):
            nn.init.normal_(param, std=0.02 / math.sqrt(2 * config.n_layer))
        else:
            nn.init.normal_(param, std=0.02)


def stage_layout(n_layer: int, n_stages: int) -> list[range]:
    """Which blocks each pipeline stage holds: contiguous, as even as possible, earlier stages
    taking the remainder (stage 0 also holds the embedding, the last stage the head)."""
    if not 1 <= n_stages <= n_layer:
        raise ConfigError(f"pipeline stages must be between 1 and n_layer ({n_layer}), got {n_stages}")
    base, extra = divmod(n_layer, n_stages)
    layout, start = [], 0
    for s in range(n_stages):
        count = base + (1 if s < extra else 0)
        layout.append(range(start, start + count))
        start += count
    return layout


def language_model_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy; logits (B, T, V), targets (B, T)."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
