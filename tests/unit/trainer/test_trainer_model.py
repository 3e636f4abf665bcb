"""The decoder: stage slices compose to the whole model, parameter counts, presets."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.errors import ConfigError
from trainer.model import (
    TIED_EMBEDDING,
    TIED_HEAD,
    CausalLM,
    KVCache,
    ModelConfig,
    build_stage,
    language_model_loss,
    stage_layout,
)
from trainer.planner import stage_parameter_shapes
from trainer.presets import MODEL_PRESETS, run_preset

TINY = MODEL_PRESETS["tiny"]
LLAMA_UNTIED = ModelConfig(
    family="llama",
    vocab_size=300,
    context=32,
    num_hidden_layers=3,
    hidden_size=32,
    intermediate_size=48,
    num_attention_heads=4,
    num_key_value_heads=2,
    tie_word_embeddings=False,
)


def test_stages_chained_compute_exactly_the_whole_model() -> None:
    whole = CausalLM(TINY, seed=7)
    stages = [build_stage(TINY, stage=s, n_stages=3, seed=7) for s in range(3)]
    tokens = torch.randint(0, TINY.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    x = tokens
    for stage in stages:
        x = stage(x)
    assert torch.equal(x, whole(tokens))


@pytest.mark.parametrize("config", [TINY, LLAMA_UNTIED], ids=["qwen2-tied", "llama-untied"])
def test_two_stages_build_exactly_the_whole_models_weights(config: ModelConfig) -> None:
    """Per-parameter seeding: each stage builds only its slice, and together (the tied copy set
    aside) they hold every parameter of the whole model once, bit for bit."""
    whole = dict(CausalLM(config, seed=3).named_parameters())
    stages = [build_stage(config, stage=s, n_stages=2, seed=3) for s in range(2)]
    assert (
        next(n for n, _ in stages[1].named_parameters()) == "model.layers.2.self_attn.q_proj.weight"
    )
    held = {
        n: p
        for stage in stages
        for n, p in stage.named_parameters()
        if not (n == TIED_HEAD and stage.holds_tied_copy)
    }
    assert sorted(held) == sorted(whole)
    for name, param in held.items():
        assert torch.equal(param, whole[name]), name


def test_tied_copy_on_the_last_stage_starts_equal_to_stage_zero() -> None:
    first = build_stage(TINY, stage=0, n_stages=2, seed=11)
    last = build_stage(TINY, stage=1, n_stages=2, seed=11)
    assert last.holds_tied_copy and not first.holds_tied_copy
    assert torch.equal(first.tied_weight(), last.tied_weight())
    assert TIED_HEAD in dict(last.named_parameters()) and TIED_EMBEDDING in dict(
        first.named_parameters()
    )


def test_a_tied_whole_model_has_one_embedding_matrix_and_uses_it_as_the_head() -> None:
    model = CausalLM(TINY, seed=0)
    assert TIED_HEAD not in dict(model.named_parameters())
    assert model.lm_head is not None and model.model.embed_tokens is not None
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_parameter_names_are_those_of_transformers_qwen2_and_llama() -> None:
    qwen = [n for n, _ in CausalLM(TINY).named_parameters() if ".layers.0." in n]
    assert qwen == [
        f"model.layers.0.{n}"
        for n in (
            "self_attn.q_proj.weight",
            "self_attn.q_proj.bias",
            "self_attn.k_proj.weight",
            "self_attn.k_proj.bias",
            "self_attn.v_proj.weight",
            "self_attn.v_proj.bias",
            "self_attn.o_proj.weight",
            "mlp.gate_proj.weight",
            "mlp.up_proj.weight",
            "mlp.down_proj.weight",
            "input_layernorm.weight",
            "post_attention_layernorm.weight",
        )
    ]
    llama = dict(CausalLM(LLAMA_UNTIED).named_parameters())
    assert not [n for n in llama if n.endswith(".bias")]
    assert {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} <= set(llama)


def test_a_different_seed_gives_different_weights() -> None:
    a = CausalLM(TINY, seed=0).tied_weight()
    b = CausalLM(TINY, seed=1).tied_weight()
    assert not torch.equal(a, b)


@pytest.mark.parametrize(
    "config",
    [TINY, MODEL_PRESETS["tiny-wide"], LLAMA_UNTIED],
    ids=["qwen2-tied", "tiny-wide", "llama-untied"],
)
def test_parameter_count_matches_the_instantiated_model_and_the_planner(
    config: ModelConfig,
) -> None:
    model = CausalLM(config, seed=0)
    numel = sum(p.numel() for p in model.parameters())
    assert config.parameter_count() == numel
    # The planner's shapes over two stages, the last stage's copy of a tied embedding set aside.
    planned = [
        s
        for stage in range(2)
        for name, s in stage_parameter_shapes(config, stage=stage, stages=2)
        if not (name == TIED_HEAD and config.tie_word_embeddings)
    ]
    assert sum(math.prod(s) for s in planned) == numel
    logits = model(torch.randint(0, config.vocab_size, (2, config.context)))
    assert logits.shape == (2, config.context, config.vocab_size)


def test_decoding_with_the_cache_computes_what_the_full_forward_computes() -> None:
    model = CausalLM(LLAMA_UNTIED, seed=5)
    tokens = torch.randint(
        0, LLAMA_UNTIED.vocab_size, (1, 12), generator=torch.Generator().manual_seed(1)
    )
    full = model(tokens)
    cache = KVCache()
    steps = [model(tokens[:, :8], cache)] + [
        model(tokens[:, i : i + 1], cache) for i in range(8, 12)
    ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)
    assert cache.length == 12
    with pytest.raises(ValueError, match="one new position after 12"):
        model(tokens[:, :2], cache)


def test_qwen_107b_preset_has_about_107_billion_parameters() -> None:
    count = MODEL_PRESETS["qwen1.5-107b"].parameter_count()
    assert 106.5e9 < count < 107.5e9


def test_tiny_preset_is_small_enough_for_two_cpu_cores() -> None:
    assert 0.2e6 <= TINY.parameter_count() <= 1e6
    assert run_preset("tiny").micro_batches == 2


def test_the_cpu_compression_preset_is_a_10_to_30m_model_with_a_trained_bpe() -> None:
    """Issue 14: large enough that compression matters (hidden >= 256, 10-30M parameters, a BPE
    vocabulary of 8-16k trained at data-build time), small enough for 2 CPU cores."""
    run = run_preset("qwen2-12m")
    model = run.model
    assert 10e6 <= model.parameter_count() <= 30e6
    assert model.hidden_size >= 256 and model.num_key_value_heads < model.num_attention_heads
    assert run.data.tokenizer_vocab_size == model.vocab_size and 8192 <= model.vocab_size <= 16384
    assert run.method == "dilocox" and run.outer.rank < model.hidden_size // 8


def test_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="tiny"):
        run_preset("huge")


def test_stage_layout_is_contiguous_and_front_loaded() -> None:
    assert stage_layout(5, 2) == [range(0, 3), range(3, 5)]
    with pytest.raises(ConfigError, match="between 1 and num_hidden_layers"):
        stage_layout(2, 3)


def test_model_config_rejects_bad_shapes_by_field_name() -> None:
    with pytest.raises(ConfigError, match="num_key_value_heads"):
        ModelConfig(num_attention_heads=4, num_key_value_heads=3)
    with pytest.raises(ConfigError, match="divisible"):
        ModelConfig(hidden_size=30, num_attention_heads=4)
    with pytest.raises(ConfigError, match="family"):
        ModelConfig(family="gpt2")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="rms_norm_eps"):
        ModelConfig(rms_norm_eps=0.0)


def test_loss_of_uniform_logits_is_log_vocab() -> None:
    logits = torch.zeros(1, 4, 256)
    loss = language_model_loss(logits, torch.zeros(1, 4, dtype=torch.long))
    assert loss.item() == pytest.approx(torch.log(torch.tensor(256.0)).item())
