"""Every checkpoint is a Hugging Face model repo: transformers loads the folder the trainer
writes with no extra code and computes our logits (fp32, CPU, within 1e-5), and its greedy
``generate`` gives our ``greedy_generate`` token for token.

The folder is written by the trainer's own pieces: each pipeline stage's model file as
``stage_files`` selects it, the coordinator's model-repo JSON files, and the local recorder
that writes them and the safetensors index. A multi-process run's folder is checked the same
way in tests/integration/test_trainer_runs.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import transformers

from records.outer_step import Quorum
from trainer.checkpoint_layout import MODEL_INDEX, TRAINER_STATE, model_file
from trainer.errors import CheckpointError, ConfigError
from trainer.generate import greedy_generate, model_from_state
from trainer.hf_repo import (
    GENERATION_CONFIG,
    HF_CONFIG,
    TokenizerExport,
    hf_config,
    load_pretrained,
    model_config_from_hf,
    repo_json_files,
)
from trainer.model import TIED_EMBEDDING, TIED_HEAD, CausalLM, ModelConfig, build_stage
from trainer.recorder import OuterStepReport, ProcessInfo
from trainer.runtime.state import model_file_tensors
from veritrain.record.local_recorder import LocalDirectoryRecorder, step_directory


def shape(family: str, *, tied: bool) -> ModelConfig:
    # Non-default RoPE base and norm epsilon: a config.json that lost them would change the logits.
    return ModelConfig(
        family=family,
        vocab_size=96,
        context=40,
        num_hidden_layers=4,
        hidden_size=48,  # type: ignore[arg-type]
        intermediate_size=112,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-5,
        rope_theta=5e5 if family == "llama" else 1e6,
        tie_word_embeddings=tied,
    )


CONFIGS = {
    f"{family}-{'tied' if tied else 'untied'}": shape(family, tied=tied)
    for family in ("qwen2", "llama")
    for tied in (True, False)
}
PROMPTS = [[5, 17, 3], [42], [7, 7, 8, 9, 10, 11]]
NEW_TOKENS = 16


def trained_looking_state(config: ModelConfig) -> dict[str, torch.Tensor]:
    """The seed's weights plus seeded noise (biases too): a freshly initialised tied model just
    repeats its input token, which would make the generation comparison say little."""
    model = CausalLM(config, seed=1)
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.15)
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def write_step(
    config: ModelConfig, state: dict[str, torch.Tensor], root: Path, tokenizer: TokenizerExport
) -> Path:
    """One outer step's files as a 2-stage run saves them: each stage's model file, the
    coordinator's trainer state and model-repo files; the recorder adds the index."""
    stages = 2
    recorder = LocalDirectoryRecorder(
        root, ProcessInfo(rank=0, world_size=stages, cluster=0, stage=0, clusters=1, stages=stages)
    )
    digests: dict[str, str] = {}
    for s in range(stages):
        module = build_stage(config, stage=s, n_stages=stages, seed=1)
        with torch.no_grad():
            for name, param in module.named_parameters():
                param.copy_(
                    state[TIED_EMBEDDING if name == TIED_HEAD and module.holds_tied_copy else name]
                )
        json_files = (
            {TRAINER_STATE: {"step": 0}, **repo_json_files(config, tokenizer)} if s == 0 else {}
        )
        digests.update(
            recorder.save_state(0, {model_file(s, stages): model_file_tensors(module)}, json_files)
        )
    recorder.record_outer_step(
        OuterStepReport(
            step=0,
            inner_steps=1,
            method="diloco",
            metrics={},
            data_ranges=[],
            contribution_digests=[],
            applied=[],
            anomalies=[],
            files=digests,
            quorum=Quorum(id=1, clusters=(0,), joined=(), left=()),
        )
    )
    return step_directory(root, 0)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_transformers_loads_the_folder_and_computes_our_logits_and_generations(
    name: str, tmp_path: Path
) -> None:
    config = CONFIGS[name]
    state = trained_looking_state(config)
    ours_without_eos = greedy_generate(config, state, PROMPTS, NEW_TOKENS)
    assert len({t for tokens in ours_without_eos for t in tokens}) > 4, (
        ours_without_eos
    )  # not a constant
    eos = ours_without_eos[0][5]  # so that generation stops early for at least the first prompt
    folder = write_step(
        config, state, tmp_path, TokenizerExport(eos_token_id=eos, bos_token_id=1, pad_token_id=0)
    )

    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    assert (
        type(hf).__name__
        == {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}[config.family]
    )
    assert hf.dtype == torch.float32
    weight_map = json.loads((folder / MODEL_INDEX).read_text())["weight_map"]
    if config.tie_word_embeddings:  # stored once; transformers re-ties the head to the embedding
        assert TIED_HEAD not in weight_map
        assert hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
    else:
        assert {TIED_HEAD, TIED_EMBEDDING} <= set(weight_map)

    tokens = torch.randint(
        0, config.vocab_size, (3, config.context), generator=torch.Generator().manual_seed(3)
    )
    loaded_config, loaded_state = load_pretrained(folder)
    assert loaded_config == config
    with torch.no_grad():
        theirs = hf(tokens).logits
        ours = model_from_state(loaded_config, loaded_state)(tokens)
    assert theirs.shape == ours.shape == (3, config.context, config.vocab_size)
    assert float((theirs - ours).abs().max()) <= 1e-5

    ours_with_eos = greedy_generate(
        loaded_config, loaded_state, PROMPTS, NEW_TOKENS, eos_token_id=eos
    )
    assert ours_with_eos[0] == ours_without_eos[0][: ours_without_eos[0].index(eos) + 1]
    for prompt, expected in zip(PROMPTS, ours_with_eos, strict=True):
        ids = torch.tensor([prompt])
        # generation_config.json supplies greedy decoding and the end-of-text id.
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS)
        assert out[0, len(prompt) :].tolist() == expected, prompt


def test_the_repo_files_name_the_architecture_shapes_and_greedy_decoding() -> None:
    config = CONFIGS["qwen2-untied"]
    files = repo_json_files(
        config, TokenizerExport(files={"tokenizer.json": b'{"version": "1.0"}'}, eos_token_id=2)
    )
    assert sorted(files) == [HF_CONFIG, GENERATION_CONFIG, "tokenizer.json"]
    document = files[HF_CONFIG]
    assert (document["architectures"], document["model_type"], document["torch_dtype"]) == (
        ["Qwen2ForCausalLM"],
        "qwen2",
        "float32",
    )
    assert (
        document["max_position_embeddings"],
        document["num_key_value_heads"],
        document["eos_token_id"],
    ) == (40, 2, 2)
    assert files[GENERATION_CONFIG] == {
        "do_sample": False,
        "bos_token_id": None,
        "eos_token_id": 2,
        "pad_token_id": None,
    }
    assert files["tokenizer.json"] == {"version": "1.0"}
    assert model_config_from_hf(document) == config


def test_a_config_json_the_model_cannot_compute_is_refused_by_field() -> None:
    document = hf_config(CONFIGS["llama-tied"], TokenizerExport())
    with pytest.raises(CheckpointError, match="attention_bias False, got True"):
        model_config_from_hf({**document, "attention_bias": True})
    with pytest.raises(CheckpointError, match="rope_scaling None"):
        model_config_from_hf({**document, "rope_scaling": {"type": "linear", "factor": 2.0}})
    with pytest.raises(CheckpointError, match=r"expected hidden_size in config\.json"):
        model_config_from_hf({k: v for k, v in document.items() if k != "hidden_size"})
    with pytest.raises(CheckpointError, match="model_type"):
        model_config_from_hf({**document, "model_type": "gpt2"})


def test_greedy_generation_refuses_to_run_past_the_context() -> None:
    config = CONFIGS["qwen2-tied"]
    state = {n: p.detach() for n, p in CausalLM(config).named_parameters()}
    with pytest.raises(ConfigError, match="fit the model's context of 40"):
        greedy_generate(config, state, [[1] * 30], max_new_tokens=11)
    assert [len(t) for t in greedy_generate(config, state, [[1] * 30], max_new_tokens=10)] == [10]
    with pytest.raises(CheckpointError, match=re.escape("missing ['lm_head.weight']")):
        greedy_generate(CONFIGS["qwen2-untied"], state, [[1]], max_new_tokens=1)


def test_a_folder_whose_index_disagrees_with_its_shards_is_refused(tmp_path: Path) -> None:
    config = CONFIGS["llama-tied"]
    state = {n: p.detach() for n, p in CausalLM(config).named_parameters()}
    folder = write_step(config, state, tmp_path, TokenizerExport())
    assert load_pretrained(folder)[1].keys() == state.keys()
    index = json.loads((folder / MODEL_INDEX).read_text())
    index["weight_map"]["model.norm.weight"] = model_file(0, 2)  # it is in the last stage's file
    (folder / MODEL_INDEX).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=re.escape(f"expected {model_file(0, 2)} to hold")):
        load_pretrained(folder)
