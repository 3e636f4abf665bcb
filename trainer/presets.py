"""Named model shapes and run presets.

Every shape is a Qwen2-architecture decoder (trainer/model.py), so every checkpoint loads in
transformers as ``Qwen2ForCausalLM``. Model presets run from "tiny" (a few outer steps on 2 CPU
cores in about a minute) up to shapes of the 100B class that the planner (``veritrain plan``)
reasons about and nothing here ever instantiates. The small shapes use grouped-query attention
(2 key/value heads for 4 query heads) and an MLP 3x the width, about the parameter count of a
GPT-2-style block of the same width.

``qwen1.5-107b``: the DiLoCoX paper (Qi et al. 2025, arXiv:2506.21263) pre-trains "a modified
Qwen1.5-107B" over 1 Gbps. Its base, Qwen1.5-110B, is published with hidden size 8192, 80
layers, 64 query heads and 8 key/value heads, SwiGLU intermediate size 49152, vocabulary
152064, untied embeddings, RoPE theta 1e6, 32768 positions, RMSNorm eps 1e-6
(huggingface.co/Qwen/Qwen1.5-110B, config.json); at 80 layers this model counts 111.2B
parameters, the published size. The paper's exact modification is not restated here; removing
three of the 80 layers gives 107.1B, the closest whole-layer match, and that is the shape we use.
"""

from __future__ import annotations

from dataclasses import replace

from trainer.config import InnerConfig, TrainConfig
from trainer.data.config import DataConfig
from trainer.errors import ConfigError
from trainer.model import ModelConfig
from trainer.outer.config import OuterConfig

QWEN2_BPE_VOCAB = 32_768
"""The BPE the qwen2-0.5b/1.5b run presets train on the stdlib corpus (all 4.7 MB of its
top-level modules, in 22 s on one core): about 3.5 bytes of text per token, and an embedding
of 29M/50M parameters, 8 %/4 % of the model (Qwen2's 151,936 rows would be 28 %/15 %)."""

MODEL_PRESETS: dict[str, ModelConfig] = {
    # ~0.21M parameters: 2 clusters x 2 stages train a few outer steps on 2 CPU cores in a
    # minute.
    "tiny": ModelConfig(
        vocab_size=256,
        context=64,
        num_hidden_layers=4,
        hidden_size=64,
        intermediate_size=192,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    # ~0.82M parameters: still CPU-sized, enough capacity for visibly better byte-level loss.
    "small": ModelConfig(
        vocab_size=256,
        context=128,
        num_hidden_layers=4,
        hidden_size=128,
        intermediate_size=384,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    # ~0.66M parameters: tiny made wider and shallower (about 1.5x its time per inner step on 2
    # cores) so the compressed matrices are 160 wide, where a rank-28 pseudo-gradient is a much
    # smaller share of the matrix than at width 64 (the bytes/loss trade-off in docs/benchmarks.md).
    "tiny-wide": ModelConfig(
        vocab_size=256,
        context=64,
        num_hidden_layers=2,
        hidden_size=160,
        intermediate_size=480,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    # ~12.6M parameters (9.4M in the blocks, 3.1M in the tied 8192 x 384 embedding): the CPU
    # preset where compression matters. Its block matrices are 384 wide, so DiLoCoX's rank 28
    # is 7 % of a matrix's smaller side (44 % at tiny's width 64), and a BPE vocabulary of 8192
    # makes every token carry about 3.5 bytes of text. 6 query heads of 64, 2 key/value heads.
    "qwen2-12m": ModelConfig(
        vocab_size=8192,
        context=128,
        num_hidden_layers=6,
        hidden_size=384,
        intermediate_size=1024,
        num_attention_heads=6,
        num_key_value_heads=2,
    ),
    # Qwen2's two smallest published shapes (huggingface.co/Qwen/Qwen2-0.5B and Qwen2-1.5B,
    # config.json; Qwen2 technical report, arXiv:2407.10671, Table 1), the sizes a single GPU
    # trains: 0.5B is hidden 896, 24 layers, 14 query heads and 2 key/value heads, SwiGLU 4864;
    # 1.5B is hidden 1536, 28 layers, 12 and 2 heads, SwiGLU 8960; both tie their embeddings,
    # use RoPE theta 1e6 and RMSNorm eps 1e-6. The vocabulary is ours: a 32768-token BPE
    # trained on the corpus at data-build time (Qwen2's own has 151,646 tokens in a matrix of
    # 151,936 rows, more than the 4.7 MB stdlib corpus can fill), so these models count 0.39B
    # and 1.36B parameters (0.49B and 1.54B with Qwen2's vocabulary), and a sequence of 1024.
    "qwen2-0.5b": ModelConfig(
        vocab_size=QWEN2_BPE_VOCAB,
        context=1024,
        num_hidden_layers=24,
        hidden_size=896,
        intermediate_size=4864,
        num_attention_heads=14,
        num_key_value_heads=2,
        rope_theta=1e6,
    ),
    "qwen2-1.5b": ModelConfig(
        vocab_size=QWEN2_BPE_VOCAB,
        context=1024,
        num_hidden_layers=28,
        hidden_size=1536,
        intermediate_size=8960,
        num_attention_heads=12,
        num_key_value_heads=2,
        rope_theta=1e6,
    ),
    "qwen1.5-107b": ModelConfig(
        family="qwen2",
        vocab_size=152_064,
        context=32_768,
        num_hidden_layers=77,
        hidden_size=8192,
        intermediate_size=49_152,
        num_attention_heads=64,
        num_key_value_heads=8,
        rms_norm_eps=1e-6,
        rope_theta=1e6,
        tie_word_embeddings=False,
    ),
}

_TINY_RUN = TrainConfig(
    preset="tiny",
    model=MODEL_PRESETS["tiny"],
    # DiLoCoX's rank is capped at half a matrix's smaller side, and tiny's matrices are 64 wide:
    # a rank-28 factor is almost the matrix, so its bytes come from bits instead -- int2
    # factors and int8 norms/biases, 1,028x fewer bytes than AllReduce at 0.4 % more loss than
    # the int4 default (docs/trainer.md, "Convergence on the tiny preset"; measured on the
    # GPT-2-style block this preset had before it became a Qwen2 shape of about the same size).
    # Nesterov momentum 0.5 instead of the overlapped default 0.8: at the 8 outer steps of
    # `bench comm --quick` momentum has no time to build and costs loss (docs/benchmarks.md,
    # "Convergence study"). Outer lr 0.9 (0.7 until the inner β₁ below was tuned): with β₁ 0.8
    # it ends 0.2-0.4 points closer to AllReduce at 8 x 25 and 0.9-2.5 points closer at 40 x 25
    # (docs/benchmarks.md, "The inner optimiser's β₁"). The short overlap (``apply_delay=3``): each
    # round's exchange is applied 3 inner steps into the next round instead of a round late, so
    # rounds start from θ rather than a look-ahead; 3 steps of ~0.1 s hide `bench comm
    # --quick`'s exchange of 0.18-0.24 s (docs/benchmarks.md, "The short overlap in the
    # trainer"). No warm-up round (``sync_rounds``): with the one-step delay, applying round 0
    # before round 1 computed was worth 0.4-1.9 points; with the short overlap the clusters are
    # back on θ 3 steps into round 1 anyway, and the blocking exchange gains nothing for the
    # exchange it exposes (docs/benchmarks.md, "The warm-up round under the short overlap").
    outer=OuterConfig(bits=2, dense_bits=8, outer_lr=0.9, outer_momentum=0.5, apply_delay=3),
    # The inner schedule tuned for the AllReduce baseline (docs/benchmarks.md, "The baseline's
    # inner schedule"): a peak of 6e-3 reached over 120 inner steps instead of 3e-3 over 10. At
    # `bench comm --quick`'s 8 x 25 it lowers AllReduce's held-out loss from 2.035 to 1.715
    # (seed 0) and every other method's with it; at this preset's own 6 x 20 the same holds
    # (AllReduce 2.312 -> 2.034, DiLoCoX 2.437 -> 2.224). A loss gap measured against the old
    # schedule's AllReduce flattered DiLoCoX. AdamW's β₁ 0.8 instead of 0.9 (docs/benchmarks.md,
    # "The inner optimiser's β₁"): at 8 x 25 AllReduce ends 3.3 % lower (1.847 against 1.909,
    # the mean of seeds 0-2; its best cell, 8e-3 and β₁ 0.7, 1.835) and DiLoCoX 2.9 % lower; at
    # 40 x 25 AllReduce 0.8 % lower. β₁ 0.7 is as good for AllReduce and worse for DiLoCoX.
    inner=InnerConfig(lr=6e-3, warmup_steps=120, beta1=0.8),
    # The first round spans that warm-up (half the run at most) and the others share the rest:
    # no payload is spent on the warm-up's small steps. At `bench comm --quick`'s 8 x 25 (rounds
    # 100, 15, 15, 14 x 5) the simulated gap to AllReduce falls from 0.160 / 0.187 / 0.164 to
    # about 0.10 / 0.14 / 0.12 at the same bytes (docs/benchmarks.md); at this preset's 6 x 20
    # (60, 12 x 5) DiLoCoX ends at 2.172 instead of 2.224 (seed 0).
    warmup_round=True,
    data=DataConfig(stdlib_max_bytes=1_000_000, shard_tokens=16_384, eval_shards=2),
    clusters=2,
    stages=2,
    outer_steps=6,
    inner_steps=20,
    micro_batches=2,
    micro_batch_size=4,
    eval_batches=4,
)

_QWEN2_DATA = DataConfig(
    stdlib_max_bytes=8_000_000,  # every top-level stdlib module (4.7 MB on 3.11)
    tokenizer_vocab_size=QWEN2_BPE_VOCAB,
    shard_tokens=65_536,
    eval_shards=2,
)

RUN_PRESETS: dict[str, TrainConfig] = {
    "tiny": _TINY_RUN,
    # The same data, topology and batch as tiny; the comm bench's schedule (8 x 25) by default.
    # Tuned by the convergence study at this width (docs/benchmarks.md, "A wider model"): tiny's
    # outer step then (lr 0.7; kept at β₁ 0.8, where 0.9 and 1.0 did no better) and short
    # overlap, and the bytes its 160-wide matrices leave spent on rank instead of bits -- int2
    # factors at rank 72 (int8 norms and biases), 1,036x fewer bytes than AllReduce, where int4
    # at rank 28 (the width study's setting, before) was 1,283x. At T = 40 x H = 25 the
    # simulated gap to AllReduce falls from 0.088 / 0.082 / 0.074 (the outer algorithm's
    # defaults, at the inner schedule below) to 0.054 / 0.029 / 0.037 (seeds 0 / 1 / 2; at
    # β₁ 0.8, 0.046 / 0.040 / 0.045).
    "tiny-wide": replace(
        _TINY_RUN,
        preset="tiny-wide",
        model=MODEL_PRESETS["tiny-wide"],
        outer=OuterConfig(
            bits=2, dense_bits=8, outer_lr=0.7, outer_momentum=0.5, apply_delay=3
        ).with_rank(72),
        # AllReduce's best over a grid of peaks and warm-ups at this width: a peak of 3e-3 (not
        # tiny's 6e-3: the wider model wants less) after tiny's 120 warm-up steps, spanned by the
        # first round; tiny's β₁ 0.8 (AllReduce 1.9 % and DiLoCoX 1.8 % lower at 8 x 25).
        inner=InnerConfig(lr=3e-3, warmup_steps=120, beta1=0.8),
        outer_steps=8,
        inner_steps=25,
    ),
    # Trains a BPE of 8192 tokens on the stdlib corpus at data-build time; DiLoCoX with the
    # outer algorithm's int4 rank-28 factors and bf16 small tensors, and tiny's outer step: lr
    # 0.7, Nesterov 0.5 (the GPU study of docs/benchmarks.md: at T = 40 x H = 25, under the
    # one-step delay with one warm-up round, the loss gap to AllReduce fell from 0.069 / 0.147 to
    # 0.021 / 0.044 at seeds 0 / 1). Tiny's short overlap (``apply_delay=3``, no warm-up round)
    # instead of that one-step delay: at `bench comm --quick`'s 8 x 25 the simulated gap falls
    # from 0.164 / 0.264 / 0.156 to 0.051 / 0.176 / 0.062 (seeds 0 / 1 / 2), and `bench comm
    # --quick`'s from 0.117 to 0.036 at seed 0; at seed 1 it is 0.148, level with uncompressed
    # DiLoCo's 0.149 (docs/benchmarks.md, "The short overlap at this width"). A few outer steps on
    # 2 CPU cores take minutes.
    "qwen2-12m": TrainConfig(
        preset="qwen2-12m",
        method="dilocox",
        model=MODEL_PRESETS["qwen2-12m"],
        outer=OuterConfig(kind="dilocox", outer_lr=0.7, outer_momentum=0.5, apply_delay=3),
        data=DataConfig(
            stdlib_max_bytes=4_000_000,
            tokenizer_vocab_size=8192,
            shard_tokens=65_536,
            eval_shards=2,
        ),
        clusters=2,
        stages=2,
        outer_steps=4,
        inner_steps=10,
        micro_batches=2,
        micro_batch_size=4,
        eval_batches=2,
    ),
    # One GPU per cluster: two clusters may share it (separate worlds), S1, bf16, DiLoCoX with
    # the outer algorithm's defaults; the inner batch is the throughput bench's 4 x 8 x 1024
    # (docs/benchmarks.md, "On a GPU"). On a CPU a step takes minutes: use it to check a change.
    **{
        name: TrainConfig(
            preset=name,
            method="dilocox",
            model=MODEL_PRESETS[name],
            outer=OuterConfig(kind="dilocox"),
            data=_QWEN2_DATA,
            clusters=2,
            stages=1,
            outer_steps=4,
            inner_steps=20,
            micro_batches=4,
            micro_batch_size=8,
            eval_batches=2,
            precision="bf16",
        )
        for name in ("qwen2-0.5b", "qwen2-1.5b")
    },
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
