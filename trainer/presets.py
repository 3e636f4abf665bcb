"""Named model shapes and run presets.

Model presets run from "tiny" (a few outer steps on 2 CPU cores in about a minute) up to
shapes of the 100B class that the planner (``veritrain plan``) reasons about and nothing here
ever instantiates.

``qwen1.5-107b``: the DiLoCoX paper (Qi et al. 2025, arXiv:2506.21263) pre-trains "a modified
Qwen1.5-107B" over 1 Gbps. Its base, Qwen1.5-110B, is published with hidden size 8192, 80
layers, 64 query heads and 8 key/value heads, SwiGLU intermediate size 49152, vocabulary
152064, untied embeddings, RoPE theta 1e6, 32768 positions (huggingface.co/Qwen/Qwen1.5-110B,
config.json). The paper's exact modification is not restated here; removing three of the 80
layers gives 107.1B parameters in this model's parameter count, the closest whole-layer match,
and that is the shape we use.
"""

from __future__ import annotations

from dataclasses import replace

from trainer.config import TrainConfig
from trainer.data.config import DataConfig
from trainer.errors import ConfigError
from trainer.model import ModelConfig
from trainer.outer.config import OuterConfig

MODEL_PRESETS: dict[str, ModelConfig] = {
    # ~0.22M parameters: 2 clusters x 2 stages train a few outer steps on 2 CPU cores in a minute.
    "tiny": ModelConfig(vocab_size=256, context=64, n_layer=4, n_head=4, d_model=64),
    # ~0.8M parameters: still CPU-sized, enough capacity for visibly better byte-level loss.
    "small": ModelConfig(vocab_size=256, context=128, n_layer=4, n_head=4, d_model=128),
    # ~0.67M parameters: tiny made wider and shallower (about 1.5x its time per inner step on 2
    # cores) so the compressed matrices are 160 wide, where a rank-28 pseudo-gradient is a much
    # smaller share of the matrix than at width 64 (the bytes/loss trade-off in docs/benchmarks.md).
    "tiny-wide": ModelConfig(vocab_size=256, context=64, n_layer=2, n_head=4, d_model=160),
    # GPT-2 small's shape (Radford et al. 2019) on bytes: 85M parameters.
    "gpt2-124m": ModelConfig(vocab_size=256, context=1024, n_layer=12, n_head=12, d_model=768),
    "qwen1.5-107b": ModelConfig(
        vocab_size=152_064,
        context=32_768,
        n_layer=77,
        n_head=64,
        n_kv_head=8,
        d_model=8192,
        d_ff=49_152,
        mlp="swiglu",
        norm="rmsnorm",
        positions="rope",
        rope_theta=1e6,
        tie_embeddings=False,
    ),
}

_TINY_RUN = TrainConfig(
    preset="tiny",
    model=MODEL_PRESETS["tiny"],
    # DiLoCoX's rank is capped at half a matrix's smaller side, and tiny's matrices are 64 wide:
    # a rank-28 factor is almost the matrix, so its bytes come from bits instead -- int2
    # factors and int8 norms/biases, 1,028x fewer bytes than AllReduce at 0.4 % more loss than
    # the int4 default (docs/trainer.md, "Convergence on the tiny preset").
    outer=OuterConfig(bits=2, dense_bits=8),
    data=DataConfig(stdlib_max_bytes=1_000_000, shard_tokens=16_384, eval_shards=2),
    clusters=2,
    stages=2,
    outer_steps=6,
    inner_steps=20,
    micro_batches=2,
    micro_batch_size=4,
    eval_batches=4,
)

RUN_PRESETS: dict[str, TrainConfig] = {
    "tiny": _TINY_RUN,
    # The same data, topology and batch as tiny; the comm bench's schedule (8 x 25) by default.
    # The outer algorithm's own defaults (int4), as in the width study of docs/benchmarks.md.
    "tiny-wide": replace(_TINY_RUN, preset="tiny-wide", model=MODEL_PRESETS["tiny-wide"], outer=OuterConfig(),
                         outer_steps=8, inner_steps=25),
    "small": TrainConfig(
        preset="small",
        model=MODEL_PRESETS["small"],
        clusters=2,
        stages=2,
        outer_steps=20,
        inner_steps=50,
        micro_batches=4,
        micro_batch_size=8,
    ),
}


def run_preset(name: str) -> TrainConfig:
    """The run preset ``name`` (a model preset without a run preset gets the defaults)."""
    if name in RUN_PRESETS:
        return RUN_PRESETS[name]
    if name in MODEL_PRESETS:
        return TrainConfig(preset=name, model=MODEL_PRESETS[name])
    known = sorted({*RUN_PRESETS, *MODEL_PRESETS})
    raise ConfigError(f"expected a preset among {', '.join(known)}, got {name!r}")
