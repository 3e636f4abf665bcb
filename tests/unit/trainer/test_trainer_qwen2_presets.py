"""The GPU-sized presets: Qwen2-0.5B's and Qwen2-1.5B's published shapes (trainer/presets.py),
which transformers builds from the config.json every checkpoint carries, and which train on a CPU
(one block at the preset's width, a short sequence: the full depth needs gigabytes this test
machine does not spare; every block is the same shape)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import transformers

from trainer.config import InnerConfig
from trainer.hf_repo import TokenizerExport, hf_config
from trainer.model import CausalLM, language_model_loss
from trainer.presets import MODEL_PRESETS, QWEN2_BPE_VOCAB, run_preset
from trainer.runtime.inner import inner_adamw

PUBLISHED = {  # huggingface.co/Qwen/Qwen2-0.5B and Qwen2-1.5B, config.json
    "qwen2-0.5b": (896, 24, 14, 2, 4864),
    "qwen2-1.5b": (1536, 28, 12, 2, 8960),
}


@pytest.mark.parametrize("preset", sorted(PUBLISHED))
def test_the_preset_has_qwen2s_published_shape_and_loads_in_transformers(preset: str) -> None:
    model = MODEL_PRESETS[preset]
    shape = (
        model.hidden_size,
        model.num_hidden_layers,
        model.num_attention_heads,
        model.num_key_value_heads,
        model.intermediate_size,
    )
    assert shape == PUBLISHED[preset]
    assert (model.tie_word_embeddings, model.rope_theta, model.family) == (True, 1e6, "qwen2")
    assert model.vocab_size == QWEN2_BPE_VOCAB
    assert run_preset(preset).data.tokenizer_vocab_size == QWEN2_BPE_VOCAB
    document = hf_config(model, TokenizerExport())
    config = transformers.Qwen2Config(**document)
    with torch.device("meta"):  # shapes only: nothing is allocated
        theirs = transformers.Qwen2ForCausalLM(config)
        ours = CausalLM(model)
    assert {n: tuple(p.shape) for n, p in theirs.named_parameters()} == {
        n: tuple(p.shape) for n, p in ours.named_parameters()
    }
    assert sum(p.numel() for p in ours.parameters()) == model.parameter_count()


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(PUBLISHED))
def test_a_block_of_the_preset_trains_one_inner_step_on_cpu(preset: str) -> None:
    shape = replace(MODEL_PRESETS[preset], num_hidden_layers=1, context=16)
    model = CausalLM(shape)
    optimizer = inner_adamw(model.parameters(), InnerConfig())
    tokens = torch.randint(0, shape.vocab_size, (1, 17), generator=torch.Generator().manual_seed(0))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    before = language_model_loss(model(inputs), targets)
    before.backward()
    optimizer.step()
    with torch.no_grad():
        after = language_model_loss(model(inputs), targets)
    assert torch.isfinite(before) and torch.isfinite(after)
    assert after < before  # one AdamW step on the batch lowers its loss
