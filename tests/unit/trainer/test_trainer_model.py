"""The decoder: stage slices compose to the whole model, parameter counts, presets."""

from __future__ import annotations

import pytest
import torch

from trainer.errors import ConfigError
from trainer.model import (
    GPT,
    TIED_HEAD,
    ModelConfig,
    build_stage,
    language_model_loss,
    stage_layout,
)
from trainer.presets import MODEL_PRESETS, run_preset

TINY = MODEL_PRESETS["tiny"]


def test_stages_chained_compute_exactly_the_whole_model() -> None:
    whole = GPT(TINY, seed=7)
    stages = [build_stage(TINY, stage=s, n_stages=3, seed=7) for s in range(3)]
    tokens = torch.randint(0, TINY.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    x = tokens
    for stage in stages:
        x = stage(x)
    assert torch.equal(x, whole(tokens))


def test_stage_parameters_carry_full_model_names_and_initial_values() -> None:
    whole = dict(GPT(TINY, seed=3).named_parameters())
    last = build_stage(TINY, stage=1, n_stages=2, seed=3)
    names = [n for n, _ in last.named_parameters()]
    assert names[0] == "blocks.2.ln_1.weight"  # global block index, not 0
    for name, param in last.named_parameters():
        reference = whole["embed.wte.weight"] if name == TIED_HEAD else whole[name]
        assert torch.equal(param, reference), name


def test_tied_copy_on_the_last_stage_starts_equal_to_stage_zero() -> None:
    first = build_stage(TINY, stage=0, n_stages=2, seed=11)
    last = build_stage(TINY, stage=1, n_stages=2, seed=11)
    assert last.holds_tied_copy and not first.holds_tied_copy
    assert torch.equal(first.tied_weight(), last.tied_weight())


def test_a_different_seed_gives_different_weights() -> None:
    a = GPT(TINY, seed=0).embed.wte.weight
    b = GPT(TINY, seed=1).embed.wte.weight
    assert not torch.equal(a, b)


@pytest.mark.parametrize(
    "config",
    [
        TINY,
        ModelConfig(vocab_size=300, context=32, n_layer=2, n_head=4, n_kv_head=2, d_model=32, d_ff=48,
                    mlp="swiglu", norm="rmsnorm", positions="rope", tie_embeddings=False),
    ],
    ids=["gpt2-style", "qwen-style"],
)
def test_parameter_count_matches_the_instantiated_model(config: ModelConfig) -> None:
    model = GPT(config, seed=0)
    assert config.parameter_count() == sum(p.numel() for p in model.parameters())
    logits = model(torch.randint(0, config.vocab_size, (2, config.context)))
    assert logits.shape == (2, config.context, config.vocab_size)


def test_qwen_107b_preset_has_about_107_billion_parameters() -> None:
    count = MODEL_PRESETS["qwen1.5-107b"].parameter_count()
    assert 106.5e9 < count < 107.5e9


def test_tiny_preset_is_small_enough_for_two_cpu_cores() -> None:
    assert 0.2e6 <= TINY.parameter_count() <= 1e6
    assert run_preset("tiny").micro_batches == 2


def test_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="tiny"):
        run_preset("huge")


def test_stage_layout_is_contiguous_and_front_loaded() -> None:
    assert stage_layout(5, 2) == [range(0, 3), range(3, 5)]
    with pytest.raises(ConfigError, match="between 1 and n_layer"):
        stage_layout(2, 3)


def test_model_config_rejects_bad_shapes_by_field_name() -> None:
    with pytest.raises(ConfigError, match="n_kv_head"):
        ModelConfig(n_head=4, n_kv_head=3)
    with pytest.raises(ConfigError, match="divisible"):
        ModelConfig(d_model=30, n_head=4)


def test_loss_of_uniform_logits_is_log_vocab() -> None:
    logits = torch.zeros(1, 4, 256)
    loss = language_model_loss(logits, torch.zeros(1, 4, dtype=torch.long))
    assert loss.item() == pytest.approx(torch.log(torch.tensor(256.0)).item())
