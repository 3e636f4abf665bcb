"""The Hugging Face model-repo files of a checkpoint: ``config.json``, ``generation_config.json``
and the tokenizer's files, written by the coordinator next to ``trainer_state.json`` -- and the
whole model read back from such a folder.

With the safetensors shards and ``model.safetensors.index.json`` they make every checkpoint
folder a model repo that ``transformers.AutoModelForCausalLM.from_pretrained`` loads with no
extra code (DESIGN.md §6). ``config.json`` is written in the keys transformers has read since
v4 (``torch_dtype``, ``rope_theta``; transformers 5 maps them onto ``dtype`` and
``rope_parameters`` itself), as Qwen's and Meta's published checkpoints are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from trainer.checkpoint_layout import MODEL_INDEX
from trainer.errors import CheckpointError, ConfigError
from trainer.model import FAMILIES, ModelConfig

HF_CONFIG = "config.json"
GENERATION_CONFIG = "generation_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
REPO_METADATA = (HF_CONFIG, GENERATION_CONFIG, TOKENIZER_CONFIG)
"""The files whose content depends on the model-repo format (:data:`REPO_FORMAT`)."""

ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}
"""transformers' class for each family (config.json's ``architectures``)."""
INITIALIZER_RANGE = 0.02
"""The std of trainer.model.init_weights (config.json's ``initializer_range``)."""


@dataclass(frozen=True, kw_only=True)
class TokenizerExport:
    """What every checkpoint carries of the run's tokenizer: its files, written verbatim into
    each step's folder by the coordinator (``tokenizer.json``, ``tokenizer_config.json``, ...),
    and the special token ids config.json and generation_config.json name. Empty (no files, no
    ids) for a tokenizer that has none, e.g. raw bytes."""

    files: Mapping[str, bytes] = field(default_factory=dict)
    """File name -> bytes. Each must be a JSON document (every file a ``tokenizers`` tokenizer
    needs is): the Recorder protocol carries JSON files, not raw bytes."""
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    """Generation stops at this token."""
    pad_token_id: int | None = None

    def __post_init__(self) -> None:
        for name in self.files:
            if not name.endswith(".json") or name in (HF_CONFIG, GENERATION_CONFIG):
                raise ConfigError(
                    f"TokenizerExport.files must be JSON files other than {HF_CONFIG} and "
                    f"{GENERATION_CONFIG}, got {name!r}"
                )

    def json_files(self) -> dict[str, Any]:
        """The tokenizer files as the JSON documents the recorder writes."""
        documents = {}
        for name, data in self.files.items():
            try:
                documents[name] = json.loads(data)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise ConfigError(f"expected tokenizer file {name} to be JSON: {exc}") from exc
        return documents

    def special_token_ids(self) -> dict[str, int | None]:
        return {
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id,
        }


def hf_config(model: ModelConfig, tokenizer: TokenizerExport) -> dict[str, Any]:
    """config.json of a transformers ``Qwen2Config`` / ``LlamaConfig`` for ``model``: fp32
    weights, every shape field, greedy-friendly defaults."""
    document: dict[str, Any] = {
        "architectures": [ARCHITECTURES[model.family]],
        "model_type": model.family,
        "torch_dtype": "float32",
        "vocab_size": model.vocab_size,
        "hidden_size": model.hidden_size,
        "intermediate_size": model.intermediate_size,
        "num_hidden_layers": model.num_hidden_layers,
        "num_attention_heads": model.num_attention_heads,
        "num_key_value_heads": model.num_key_value_heads,
        "hidden_act": "silu",
        "max_position_embeddings": model.context,
        "rms_norm_eps": model.rms_norm_eps,
        "rope_theta": model.rope_theta,
        "rope_scaling": None,
        "tie_word_embeddings": model.tie_word_embeddings,
        "initializer_range": INITIALIZER_RANGE,
        "attention_dropout": 0.0,
        "use_cache": True,
        **tokenizer.special_token_ids(),
    }
    if model.family == "qwen2":
        # Qwen2's attention biases are implied by the architecture; sliding windows are off.
        document |= {
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": model.num_hidden_layers,
        }
    else:
        document |= {
            "attention_bias": False,
            "mlp_bias": False,
            "head_dim": model.head_dim,
            "pretraining_tp": 1,
        }
    return document


def generation_config(tokenizer: TokenizerExport) -> dict[str, Any]:
    """generation_config.json: greedy decoding, the tokenizer's special ids."""
    return {"do_sample": False, **tokenizer.special_token_ids()}


def repo_json_files(model: ModelConfig, tokenizer: TokenizerExport) -> dict[str, Any]:
    """Every model-repo file the coordinator adds to a checkpoint, as JSON documents."""
    return {
        HF_CONFIG: hf_config(model, tokenizer),
        GENERATION_CONFIG: generation_config(tokenizer),
        **tokenizer.json_files(),
    }


REPO_FORMAT = 2
"""The model-repo files written now. Format 1 (up to 0313592) left padding unnamed and, for
byte-level tokens, named no special token in ``tokenizer_config.json``: transformers then added
a 257th token the model has no row for. Format 2 names EOS = padding = the end-of-text token,
no BOS and no unknown token, in every file (trainer/data/tokenizer.py). A re-execution writes
format 2; a step recorded in format 1 is judged against :func:`as_format_1` of it."""

_FORMAT_2_TOKENIZER_KEYS = ("pad_token", "bos_token", "unk_token", "split_special_tokens")


def as_format_1(documents: Mapping[str, Any]) -> dict[str, Any]:
    """The model-repo JSON documents format 1 wrote from the same model and tokenizer as the
    format-2 ``documents`` (other files pass through unchanged): no ``pad_token_id`` in
    config.json and generation_config.json, and in tokenizer_config.json no padding, BOS or
    unknown token, and no EOS where format 2 splits special tokens (byte-level tokens, whose
    format-1 file named none)."""
    older = dict(documents)
    for name in (HF_CONFIG, GENERATION_CONFIG):
        if name in older:
            older[name] = {**older[name], "pad_token_id": None}
    config = older.get(TOKENIZER_CONFIG)
    if isinstance(config, Mapping):
        dropped = set(_FORMAT_2_TOKENIZER_KEYS)
        if config.get("split_special_tokens"):
            dropped.add("eos_token")
        older[TOKENIZER_CONFIG] = {k: v for k, v in config.items() if k not in dropped}
    return older


def model_config_from_hf(document: Mapping[str, Any]) -> ModelConfig:
    """The ModelConfig a config.json describes; refuses what trainer.model does not compute
    (another architecture, biases on a Llama, RoPE scaling, sliding windows, a head size other
    than hidden_size / heads)."""
    family = document.get("model_type")
    if family not in FAMILIES:
        raise CheckpointError(
            f"expected {HF_CONFIG} model_type among {', '.join(FAMILIES)}, got {family!r}"
        )
    rope = document.get("rope_parameters") or {}  # transformers 5 writes RoPE settings here
    checks: list[tuple[str, Any, Any]] = [
        ("hidden_act", document.get("hidden_act", "silu"), "silu"),
        ("rope_scaling", document.get("rope_scaling"), None),
        ("rope_parameters.rope_type", rope.get("rope_type", "default"), "default"),
        ("use_sliding_window", document.get("use_sliding_window", False), False),
    ]
    if family == "llama":
        checks += [
            ("attention_bias", document.get("attention_bias", False), False),
            ("mlp_bias", document.get("mlp_bias", False), False),
        ]
    for name, got, expected in checks:
        if got != expected:
            raise CheckpointError(f"expected {HF_CONFIG} {name} {expected!r}, got {got!r}")
    try:
        config = ModelConfig(
            family=family,
            vocab_size=int(document["vocab_size"]),
            context=int(document["max_position_embeddings"]),
            num_hidden_layers=int(document["num_hidden_layers"]),
            hidden_size=int(document["hidden_size"]),
            intermediate_size=int(document["intermediate_size"]),
            num_attention_heads=int(document["num_attention_heads"]),
            num_key_value_heads=int(
                document.get("num_key_value_heads") or document["num_attention_heads"]
            ),
            rms_norm_eps=float(document["rms_norm_eps"]),
            rope_theta=float(document.get("rope_theta") or rope.get("rope_theta", 10000.0)),
            tie_word_embeddings=bool(document.get("tie_word_embeddings", False)),
        )
    except KeyError as exc:
        raise CheckpointError(f"expected {exc.args[0]} in {HF_CONFIG}, it is missing") from exc
    except ConfigError as exc:
        raise CheckpointError(f"{HF_CONFIG} describes an invalid model: {exc}") from exc
    head_dim = document.get("head_dim")
    if head_dim is not None and int(head_dim) != config.head_dim:
        raise CheckpointError(
            f"expected {HF_CONFIG} head_dim {config.head_dim} (hidden_size / heads), got {head_dim}"
        )
    return config


def load_pretrained(directory: str | Path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """The model of a checkpoint folder (or any transformers-style Qwen2/Llama repo folder with
    sharded safetensors): its config.json and every weight its index names, each shard holding
    exactly the tensors the index maps to it."""
    root = Path(directory)
    config = model_config_from_hf(_json_object(root / HF_CONFIG))
    weight_map = _json_object(root / MODEL_INDEX).get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(
            f"expected a weight_map of tensor name -> shard in {root / MODEL_INDEX}"
        )
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        if Path(shard).name != shard or not shard.endswith(".safetensors"):
            raise CheckpointError(
                f"expected safetensors shard names in {MODEL_INDEX}, got {shard!r}"
            )
        tensors = load_file(root / shard)
        expected = sorted(name for name, file in weight_map.items() if file == shard)
        if sorted(tensors) != expected:
            raise CheckpointError(f"expected {shard} to hold {expected}, got {sorted(tensors)}")
        state.update(tensors)
    return config, state


def _json_object(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError as exc:
        raise CheckpointError(f"expected {path.name} in {path.parent}, found none") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"expected JSON in {path}: {exc}") from exc
    if not isinstance(document, dict):
        raise CheckpointError(f"expected an object in {path}, got {type(document).__name__}")
    return document
