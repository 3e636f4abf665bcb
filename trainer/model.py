"""A Qwen2 / Llama decoder that splits into pipeline stages, with transformers' parameter names.

Written for reading in one sitting (after nanoGPT's model.py) and for pipelining. The shape is
the one transformers' ``Qwen2ForCausalLM`` and ``LlamaForCausalLM`` compute (modeling_qwen2.py,
modeling_llama.py), so every checkpoint loads there with no conversion: RMSNorm before
attention and MLP, rotary positions in the "rotate half" layout, grouped-query attention with
separate q/k/v/o projections, a SwiGLU MLP with separate gate/up/down projections, biases on
q/k/v only for Qwen2 and nowhere for Llama, tied or untied output embedding.

The model is a flat sequence of parts -- token embedding, decoder layers, final norm and head --
and a pipeline stage is a contiguous slice of it (:func:`stage_layout`). :class:`StageModel`
holds one slice under the *full-model* names transformers uses
(``model.layers.3.self_attn.q_proj.weight``), so checkpoints, pseudo-gradients and the
single-process :class:`CausalLM` all speak the same names. Deliberate simplifications: no
dropout (determinism and tiny runs need none), no sliding-window attention, no RoPE scaling.

Initialisation is per parameter: each tensor draws from its own generator seeded by
``sha256(seed, full name)``, so a stage builds only its own slice and still gets exactly the
weights the whole model would have (what makes pipelined and single-process runs comparable).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from records.genesis import ModelSummary
from trainer.errors import ConfigError

Family = Literal["qwen2", "llama"]
FAMILIES: tuple[Family, ...] = ("qwen2", "llama")

TIED_EMBEDDING = "model.embed_tokens.weight"
"""The token embedding; with tied embeddings also the output projection, stored once."""
TIED_HEAD = "lm_head.weight"
"""The output projection. With tied embeddings it exists as a parameter of its own only on a
last stage apart from stage 0 (a copy that follows stage 0's matrix) and is never saved:
transformers re-ties it from ``tie_word_embeddings``."""


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Shape of the decoder. Field names are those of transformers' Qwen2Config/LlamaConfig
    (config.json), except ``family`` (its ``model_type``) and ``context``."""

    family: Family = "qwen2"
    """``qwen2`` (Qwen2ForCausalLM, also Qwen1.5's architecture: biases on q/k/v) or ``llama``
    (LlamaForCausalLM: no biases)."""
    vocab_size: int = 256
    """Tokens in the vocabulary (the tokenizer's size)."""
    context: int = 128
    """Training sequence length; written to config.json as ``max_position_embeddings``, the
    longest sequence the model is meant for (generation refuses to run past it)."""
    num_hidden_layers: int = 4
    """Decoder layers."""
    hidden_size: int = 128
    """Residual stream width."""
    intermediate_size: int = 384
    """SwiGLU hidden width (Shazeer 2020): gate and up project to it, down projects back."""
    num_attention_heads: int = 4
    """Query heads per layer; the head size is hidden_size / num_attention_heads."""
    num_key_value_heads: int = 4
    """Key/value heads (grouped-query attention, Ainslie et al. 2023); divides the query heads."""
    rms_norm_eps: float = 1e-6
    """Epsilon of every RMSNorm (Zhang & Sennrich 2019), as Qwen2 and Llama 3 use."""
    rope_theta: float = 10000.0
    """Rotary base frequency (Su et al. 2021); Qwen1.5 uses 1e6."""
    tie_word_embeddings: bool = True
    """Share the token embedding with the output projection (Press & Wolf 2017)."""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ConfigError(
                f"ModelConfig.family must be one of {', '.join(FAMILIES)}, got {self.family!r}"
            )
        for name in (
            "vocab_size",
            "context",
            "num_hidden_layers",
            "hidden_size",
            "intermediate_size",
            "num_attention_heads",
            "num_key_value_heads",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"ModelConfig.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"ModelConfig.num_key_value_heads must divide num_attention_heads "
                f"({self.num_attention_heads}), got {self.num_key_value_heads}"
            )
        if self.head_dim % 2:
            raise ConfigError(
                f"ModelConfig: rotary positions need an even head size, got {self.head_dim}"
            )
        if not (math.isfinite(self.rms_norm_eps) and self.rms_norm_eps > 0):
            raise ConfigError(f"ModelConfig.rms_norm_eps must be > 0, got {self.rms_norm_eps}")
        if not (math.isfinite(self.rope_theta) and self.rope_theta > 1):
            raise ConfigError(f"ModelConfig.rope_theta must be > 1, got {self.rope_theta}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def kv_dim(self) -> int:
        """Width of the key (and of the value) projection."""
        return self.num_key_value_heads * self.head_dim

    @property
    def attention_bias(self) -> bool:
        """Qwen2 keeps biases on the q, k and v projections; Llama has none anywhere."""
        return self.family == "qwen2"

    def block_parameter_count(self) -> int:
        """Parameters of one decoder layer."""
        d, f, kv = self.hidden_size, self.intermediate_size, self.kv_dim
        attention = d * d + 2 * d * kv + d * d + ((d + 2 * kv) if self.attention_bias else 0)
        return attention + 3 * d * f + 2 * d  # q, k, v, o; gate, up, down; two RMSNorm gains

    def parameter_count(self) -> int:
        """Parameters of the whole model, the tied embedding counted once."""
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        return embeddings + self.num_hidden_layers * self.block_parameter_count() + self.hidden_size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RMSNorm(nn.Module):
    """x / rms(x) * gain (Zhang & Sennrich 2019), computed in fp32 as transformers'
    Qwen2RMSNorm / LlamaRMSNorm compute it."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        out: torch.Tensor = self.weight * x32.to(dtype)
        return out


def rotary_tables(
    config: ModelConfig, *, start: int, length: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles (Su et al. 2021, RoFormer §3.4) for positions
    ``start .. start + length - 1``, each (T, head_dim).

    In transformers' "rotate half" layout: frequency i rotates the pair (i, i + head_dim/2),
    not the adjacent pair (2i, 2i+1) of the paper -- the layout Qwen and Llama checkpoints
    are trained in. Frequencies are computed as transformers computes them (theta^(-2i/dim)),
    so the tables match its to the bit."""
    dim = config.head_dim
    exponents = torch.arange(0, dim, 2, device=device).float() / dim  # 2i / dim, (dim/2,)
    inv_freq = 1.0 / (config.rope_theta**exponents)
    positions = torch.arange(start, start + length, device=device).float()
    freqs = positions[:, None] * inv_freq[None, :]  # (T, dim/2)
    angles = torch.cat((freqs, freqs), dim=-1)  # (T, dim)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate queries or keys x (B, heads, T, head_dim) by the tables of :func:`rotary_tables`."""
    half = x.size(-1) // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)  # (-x2, x1)
    return x * cos + rotated * sin


@dataclass
class KVCache:
    """Keys and values of the positions a model has already processed, per layer -- for
    generation, where each new token attends to them instead of recomputing them."""

    keys: dict[int, torch.Tensor] = field(default_factory=dict)
    """Layer index -> (B, kv_heads, length, head_dim), after rotation."""
    values: dict[int, torch.Tensor] = field(default_factory=dict)
    length: int = 0
    """Positions processed so far (the next token's position)."""


class Attention(nn.Module):
    """Causal self-attention; each group of num_attention_heads / num_key_value_heads query
    heads shares one key/value head (grouped-query attention, Ainslie et al. 2023)."""

    def __init__(self, config: ModelConfig, *, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.n_head, self.n_kv = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        d, bias = config.hidden_size, config.attention_bias
        self.q_proj = nn.Linear(d, self.n_head * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_head * self.head_dim, d, bias=False)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None = None
    ) -> torch.Tensor:
        B, T, _ = x.size()  # batch, time, channels
        # (B, T, heads * head_dim) -> (B, heads, T, head_dim)
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if cache is not None:
            if self.layer in cache.keys:  # (B, kv_heads, past + T, head_dim)
                k = torch.cat((cache.keys[self.layer], k), dim=2)
                v = torch.cat((cache.values[self.layer], v), dim=2)
            cache.keys[self.layer], cache.values[self.layer] = k, v
        # Several new positions attend causally (SDPA's mask is aligned top-left, so they must be
        # the first ones: StageModel.forward checks it); one new position sees every key.
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=T > 1, enable_gqa=self.n_kv != self.n_head
        )
        y = y.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim)
        out: torch.Tensor = self.o_proj(y)
        return out


class MLP(nn.Module):
    """SwiGLU (Shazeer 2020): down(silu(gate(x)) * up(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        d, f = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class DecoderLayer(nn.Module):
    """Pre-norm residual layer: x + attn(norm(x)), then x + mlp(norm(x)). Sub-modules are
    declared in transformers' order, which is the order of the parameters everywhere."""

    def __init__(self, config: ModelConfig, *, layer: int) -> None:
        super().__init__()
        self.self_attn = Attention(config, layer=layer)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None = None
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache)
        out: torch.Tensor = x + self.mlp(self.post_attention_layernorm(x))
        return out


class Backbone(nn.Module):
    """The parts transformers keeps under ``model.``: token embedding, layers, final norm --
    each present only on the stage that holds it."""

    def __init__(self, config: ModelConfig, *, layers: range, first: bool, last: bool) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size) if first else None
        # Keyed by the global layer index, so names stay full-model names: model.layers.3....
        self.layers = nn.ModuleDict({str(i): DecoderLayer(config, layer=i) for i in layers})
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps) if last else None


class StageModel(nn.Module):
    """A contiguous slice of the decoder: [embedding] -> layers -> [final norm, head].

    Stage 0 maps token ids (B, T) to activations (B, T, C); middle stages map activations to
    activations; the last stage returns logits (B, T, vocab)."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        layers: range,
        first: bool,
        last: bool,
        seed: int,
        activation_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        self.config = config
        self.activation_checkpointing = activation_checkpointing
        """Recompute each decoder layer during the backward pass instead of keeping its
        activations (Chen et al. 2016): a training forward keeps only every layer's input.
        ``torch.utils.checkpoint`` with ``use_reentrant=False`` re-runs the layer under the
        autocast state of its forward, so the recomputed activations -- and the gradients --
        are the same bits as without it."""
        self.model = Backbone(config, layers=layers, first=first, last=last)
        d, vocab = config.hidden_size, config.vocab_size
        self.lm_head = nn.Linear(d, vocab, bias=False) if last else None
        if self.lm_head is not None and first and config.tie_word_embeddings:
            assert self.model.embed_tokens is not None  # built above for the first stage
            # One Parameter under two modules: named_parameters() yields it once, as the embedding.
            self.lm_head.weight = self.model.embed_tokens.weight
        init_weights(self, config, seed=seed)

    def tied_weight(self) -> torch.Tensor:
        """This slice's copy of the tied embedding (stage 0's matrix, or the head's copy)."""
        if self.model.embed_tokens is not None:
            return self.model.embed_tokens.weight
        if self.lm_head is None:
            raise ConfigError(
                "expected the first or the last stage to hold the tied embedding, "
                "got a middle stage"
            )
        return self.lm_head.weight

    @property
    def holds_tied_copy(self) -> bool:
        """True when this slice holds the head's copy of a tied embedding that lives on stage 0."""
        return (
            self.config.tie_word_embeddings
            and self.lm_head is not None
            and self.model.embed_tokens is None
        )

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        if self.model.embed_tokens is not None:
            x = self.model.embed_tokens(x)  # (B, T) token ids -> (B, T, C)
        T = x.size(1)
        start = cache.length if cache is not None else 0
        if start and T > 1:
            raise ValueError(f"expected one new position after {start} cached ones, got {T}")
        cos, sin = rotary_tables(self.config, start=start, length=T, device=x.device)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        recompute = self.activation_checkpointing and cache is None and torch.is_grad_enabled()
        for layer in self.model.layers.values():
            if recompute:
                out = checkpoint(layer, x, cos, sin, use_reentrant=False)
                assert isinstance(out, torch.Tensor)  # DecoderLayer returns one tensor
                x = out
            else:
                x = layer(x, cos, sin, cache)
        if cache is not None:
            cache.length += T
        if self.model.norm is not None:
            x = self.model.norm(x)
        if self.lm_head is not None:
            x = self.lm_head(x)  # (B, T, vocab) logits
        return x


class CausalLM(StageModel):
    """The whole decoder on one device (transformers' ``*ForCausalLM``)."""

    def __init__(self, config: ModelConfig, *, seed: int = 0) -> None:
        super().__init__(
            config, layers=range(config.num_hidden_layers), first=True, last=True, seed=seed
        )


def parameter_seed(seed: int, name: str) -> int:
    """The generator seed of one parameter: the first 8 bytes of sha256("<seed>:<name>")."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") & (
        2**63 - 1
    )


def init_weights(module: nn.Module, config: ModelConfig, *, seed: int) -> None:
    """N(0, 0.02) for embeddings and projections (transformers' ``initializer_range``), the
    residual projections o_proj and down_proj scaled by 1/sqrt(2 * layers) (GPT-2, Radford et
    al. 2019, so the residual stream's variance does not grow with depth), biases 0, norm gains
    1 -- each tensor from its own seeded generator."""
    for name, param in module.named_parameters():
        # The head's copy of a tied embedding must start equal to stage 0's matrix.
        key = TIED_EMBEDDING if (name == TIED_HEAD and config.tie_word_embeddings) else name
        generator = torch.Generator().manual_seed(parameter_seed(seed, key))
        with torch.no_grad():
            if name.endswith(".bias"):
                param.zero_()
            elif name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                residual = name.endswith(("o_proj.weight", "down_proj.weight"))
                std = 0.02 / math.sqrt(2 * config.num_hidden_layers) if residual else 0.02
                param.copy_(torch.randn(param.shape, generator=generator) * std)


def stage_layout(n_layer: int, n_stages: int) -> list[range]:
    """Which layers each pipeline stage holds: contiguous, as even as possible, earlier stages
    taking the remainder (stage 0 also holds the embedding, the last stage the head)."""
    if not 1 <= n_stages <= n_layer:
        raise ConfigError(
            f"pipeline stages must be between 1 and num_hidden_layers ({n_layer}), got {n_stages}"
        )
    base, extra = divmod(n_layer, n_stages)
    layout, start = [], 0
    for s in range(n_stages):
        count = base + (1 if s < extra else 0)
        layout.append(range(start, start + count))
        start += count
    return layout


def model_summary(config: ModelConfig, stages: int) -> ModelSummary:
    """The model as a run's genesis records it: its shape, parameter count and the blocks each
    of ``stages`` pipeline stages holds."""
    return ModelSummary(
        shape=config.to_dict(),
        parameter_count=config.parameter_count(),
        stage_blocks=tuple(tuple(r) for r in stage_layout(config.num_hidden_layers, stages)),
    )


def build_stage(
    config: ModelConfig,
    *,
    stage: int,
    n_stages: int,
    seed: int,
    activation_checkpointing: bool = False,
) -> StageModel:
    """Stage ``stage`` of ``n_stages`` with its initial weights."""
    layers = stage_layout(config.num_hidden_layers, n_stages)[stage]
    return StageModel(
        config,
        layers=layers,
        first=stage == 0,
        last=stage == n_stages - 1,
        seed=seed,
        activation_checkpointing=activation_checkpointing,
    )


def language_model_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy; logits (B, T, V), targets (B, T)."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
