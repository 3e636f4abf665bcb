"""A GPT-style decoder that splits into pipeline stages.

Written for reading in one sitting (after nanoGPT's model.py) and for pipelining: the model is
a flat sequence of parts -- embedding, blocks, head -- and a pipeline stage is a contiguous slice
of it (:func:`stage_layout`). :class:`StageModel` holds one slice with the *full-model*
parameter names (``blocks.3.attn.qkv.weight``), so checkpoints, pseudo-gradients and the
single-process :class:`GPT` all speak the same names.

The default shape is GPT-2's block (LayerNorm, learned positions, GELU MLP, tied embeddings).
Four switches describe the Qwen/Llama family as well, so that the large presets the planner
uses count parameters correctly: grouped-query attention (``n_kv_head``), SwiGLU MLP, RMSNorm
and rotary positions. Deliberate simplifications: no dropout (determinism and tiny runs need
none), every Linear has a bias (Qwen1.5 has biases on q/k/v only: a few million parameters of
difference at 100B scale).

Initialisation is per parameter: each tensor draws from its own generator seeded by
``sha256(seed, full name)``, so a stage builds only its own slice and still gets exactly the
weights the whole model would have (what makes pipelined and single-process runs comparable).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from trainer.errors import ConfigError

TIED_HEAD = "head.wte.weight"
"""Name of the last stage's copy of the tied embedding when it lives apart from stage 0."""
TIED_EMBEDDING = "embed.wte.weight"
"""The canonical name of the tied embedding (stored once, in stage 0's checkpoint file)."""


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Shape of the decoder."""

    vocab_size: int = 256
    """Tokens in the vocabulary; 256 for the default byte-level tokenizer."""
    context: int = 128
    """Maximum sequence length."""
    n_layer: int = 4
    """Transformer blocks."""
    n_head: int = 4
    """Query heads per block."""
    n_kv_head: int = 0
    """Key/value heads (grouped-query attention, Ainslie et al. 2023); 0 means n_head."""
    d_model: int = 128
    """Residual stream width."""
    d_ff: int = 0
    """MLP hidden width; 0 means 4 * d_model."""
    mlp: Literal["gelu", "swiglu"] = "gelu"
    """GPT-2's GELU MLP (two matrices) or SwiGLU (Shazeer 2020; three matrices)."""
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    """LayerNorm (GPT-2) or RMSNorm (Zhang & Sennrich 2019; Llama, Qwen)."""
    positions: Literal["learned", "rope"] = "learned"
    """Learned absolute positions (GPT-2) or rotary embeddings (Su et al. 2021)."""
    rope_theta: float = 10000.0
    """Rotary base frequency (Qwen1.5 uses 1e6)."""
    tie_embeddings: bool = True
    """Share the token embedding with the output projection (Press & Wolf 2017)."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context", "n_layer", "n_head", "d_model"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_head:
            raise ConfigError(
                f"ModelConfig.d_model ({self.d_model}) must be divisible by n_head ({self.n_head})"
            )
        if self.n_kv_head < 0 or (self.n_kv_head and self.n_head % self.n_kv_head):
            raise ConfigError(
                f"ModelConfig.n_kv_head must be 0 or divide n_head ({self.n_head}), got {self.n_kv_head}"
            )
        if self.d_ff < 0:
            raise ConfigError(f"ModelConfig.d_ff must be >= 0, got {self.d_ff}")
        if self.mlp not in ("gelu", "swiglu"):
            raise ConfigError(f"ModelConfig.mlp must be 'gelu' or 'swiglu', got {self.mlp!r}")
        if self.norm not in ("layernorm", "rmsnorm"):
            raise ConfigError(f"ModelConfig.norm must be 'layernorm' or 'rmsnorm', got {self.norm!r}")
        if self.positions not in ("learned", "rope"):
            raise ConfigError(f"ModelConfig.positions must be 'learned' or 'rope', got {self.positions!r}")
        if self.positions == "rope" and self.head_dim % 2:
            raise ConfigError(f"ModelConfig: rotary positions need an even head size, got {self.head_dim}")

    @property
    def hidden(self) -> int:
        return self.d_ff or 4 * self.d_model

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def block_parameter_count(self) -> int:
        """Parameters of one transformer block."""
        d, f, kv = self.d_model, self.hidden, self.kv_heads * self.head_dim
        norms = 2 * (2 * d if self.norm == "layernorm" else d)
        attention = (d * (d + 2 * kv) + d + 2 * kv) + (d * d + d)
        mlp = (d * 2 * f + 2 * f + f * d + d) if self.mlp == "swiglu" else (d * f + f + f * d + d)
        return norms + attention + mlp

    def parameter_count(self) -> int:
        """Parameters of the whole model, the tied embedding counted once."""
        d = self.d_model
        embeddings = self.vocab_size * d * (1 if self.tie_embeddings else 2)
        positions = self.context * d if self.positions == "learned" else 0
        final_norm = 2 * d if self.norm == "layernorm" else d
        return embeddings + positions + self.n_layer * self.block_parameter_count() + final_norm

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _norm(config: ModelConfig) -> nn.Module:
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.d_model, eps=1e-6)
    return nn.LayerNorm(config.d_model)


def _rotate(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021, RoFormer §3.4), "rotate half" layout.
    x: (B, heads, T, head_dim)."""
    T, half = x.size(-2), x.size(-1) // 2
    inv_freq = theta ** (-torch.arange(half, dtype=torch.float32, device=x.device) / half)
    angles = torch.arange(T, dtype=torch.float32, device=x.device)[:, None] * inv_freq  # (T, half)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_head, self.n_kv = config.n_head, config.kv_heads
        self.head_dim = config.head_dim
        self.rope_theta = config.rope_theta if config.positions == "rope" else None
        self.qkv = nn.Linear(config.d_model, config.d_model + 2 * self.n_kv * self.head_dim)
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()  # batch, time, channels
        kv = self.n_kv * self.head_dim
        q, k, v = self.qkv(x).split([C, kv, kv], dim=2)
        # (B, T, heads * head_dim) -> (B, heads, T, head_dim)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        if self.rope_theta is not None:
            q, k = _rotate(q, self.rope_theta), _rotate(k, self.rope_theta)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=self.n_kv != self.n_head
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        out: torch.Tensor = self.proj(y)
        return out


class MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.swiglu = config.mlp == "swiglu"
        # SwiGLU packs gate and up projections into one matrix: fc -> (gate | up).
        self.fc = nn.Linear(config.d_model, config.hidden * (2 if self.swiglu else 1))
        self.proj = nn.Linear(config.hidden, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden: torch.Tensor = self.fc(x)
        if self.swiglu:
            gate, up = hidden.chunk(2, dim=-1)
            hidden = F.silu(gate) * up
        else:
            hidden = F.gelu(hidden, approximate="tanh")
        out: torch.Tensor = self.proj(hidden)
        return out


class Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.ln_1 = _norm(config)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = _norm(config)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        out: torch.Tensor = x + self.mlp(self.ln_2(x))
        return out


class Embedding(nn.Module):
    """Token (+ learned position) embedding: (B, T) token ids -> (B, T, C)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = nn.Embedding(config.context, config.d_model) if config.positions == "learned" else None

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x: torch.Tensor = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(idx.size(1), device=idx.device))
        return x


class Head(nn.Module):
    """Final norm and the output projection, whose weight is the (tied) token embedding or
    its own matrix when the embeddings are untied."""

    def __init__(self, config: ModelConfig, wte: nn.Embedding | None = None) -> None:
        super().__init__()
        self.ln_f = _norm(config)
        # Owning a separate matrix: untied, or tied with the embedding on another stage.
        self.wte = wte if wte is not None else nn.Embedding(config.vocab_size, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.ln_f(x), self.wte.weight)  # (B, T, vocab) logits


class StageModel(nn.Module):
    """A contiguous slice of the decoder: [embedding] -> blocks[layers] -> [head].

    Stage 0 maps token ids (B, T) to activations (B, T, C); middle stages map activations to
    activations; the last stage returns logits (B, T, vocab)."""

    def __init__(self, config: ModelConfig, *, layers: range, first: bool, last: bool, seed: int) -> None:
        super().__init__()
        self.config = config
        self.embed = Embedding(config) if first else None
        # A ModuleDict keyed by the global block index keeps full-model names: blocks.3.attn...
        self.blocks = nn.ModuleDict({str(i): Block(config) for i in layers})
        shared = self.embed.wte if (self.embed is not None and config.tie_embeddings) else None
        self.head = Head(config, wte=shared) if last else None
        init_weights(self, config, seed=seed)

    def tied_weight(self) -> torch.Tensor:
        """This slice's copy of the tied embedding (stage 0's matrix, or the head's copy)."""
        if self.embed is not None:
            return self.embed.wte.weight
        if self.head is None:
            raise ConfigError("expected the first or the last stage to hold the tied embedding, got a middle stage")
        return self.head.wte.weight

    @property
    def holds_tied_copy(self) -> bool:
        """True when this slice holds the head's copy of a tied embedding that lives on stage 0."""
        return self.config.tie_embeddings and self.head is not None and self.embed is None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks.values():
            x = block(x)
        if self.head is not None:
            x = self.head(x)
        return x


class GPT(StageModel):
    """The whole decoder on one device."""

    def __init__(self, config: ModelConfig, *, seed: int = 0) -> None:
        super().__init__(config, layers=range(config.n_layer), first=True, last=True, seed=seed)


def parameter_seed(seed: int, name: str) -> int:
    """The generator seed of one parameter: the first 8 bytes of sha256("<seed>:<name>")."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") & (2**63 - 1)


def init_weights(module: nn.Module, config: ModelConfig, *, seed: int) -> None:
    """GPT-2 initialisation (Radford et al. 2019): N(0, 0.02), residual projections scaled by
    1/sqrt(2 * n_layer), biases 0, norm gains 1 -- each tensor from its own seeded generator."""
    for name, param in module.named_parameters():
        # The head's copy of a tied embedding must start equal to stage 0's matrix.
        key = TIED_EMBEDDING if (name == TIED_HEAD and config.tie_embeddings) else name
        generator = torch.Generator().manual_seed(parameter_seed(seed, key))
        with torch.no_grad():
            if name.endswith("bias"):
                param.zero_()
            elif name.split(".")[-2].startswith("ln"):
                param.fill_(1.0)
            else:
                std = 0.02 / math.sqrt(2 * config.n_layer) if name.endswith("proj.weight") else 0.02
                param.copy_(torch.randn(param.shape, generator=generator) * std)


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


def build_stage(config: ModelConfig, *, stage: int, n_stages: int, seed: int) -> StageModel:
    """Stage ``stage`` of ``n_stages`` with its initial weights."""
    layers = stage_layout(config.n_layer, n_stages)[stage]
    return StageModel(config, layers=layers, first=stage == 0, last=stage == n_stages - 1, seed=seed)


def language_model_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy; logits (B, T, V), targets (B, T)."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
