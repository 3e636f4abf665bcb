"""Checkpoints written the way the recorder writes them (every rank's files with
``write_files``, the coordinator's index and trainer state, the manifest from the digests, the
manifest stored last), and a small transformer's checkpoint through a store and back; shared by
the local-store unit test, the S3 integration test and the web tests' fixture run."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import load_torch_model
from safetensors.torch import load_file

from storage import ObjectStore
from storage.checkpoint_files import (
    INDEX_FILE,
    Manifest,
    download_checkpoint,
    tensor_nbytes,
    upload_files,
    upload_manifest,
    write_files,
    write_model_index,
)
from trainer.model import CausalLM, ModelConfig, language_model_loss

CONFIG = ModelConfig(
    vocab_size=64,
    context=16,
    num_hidden_layers=2,
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=2,
    num_key_value_heads=2,
)
OPTIMIZER_FILE = "optimizer-inner.safetensors"
ERROR_FEEDBACK_FILE = "error-feedback.safetensors"
TRAINER_STATE = "trainer_state.json"


def model_shards(
    weights: Mapping[str, torch.Tensor], max_shard_bytes: int
) -> dict[str, dict[str, torch.Tensor]]:
    """``weights`` cut, in order, into Hugging Face shards of at most ``max_shard_bytes`` tensor
    bytes (a larger tensor gets a shard of its own), as pipeline stages each hold a part."""
    parts: list[dict[str, torch.Tensor]] = [{}]
    used = 0
    for name, size in tensor_nbytes(weights).items():
        if parts[-1] and used + size > max_shard_bytes:
            parts.append({})
            used = 0
        parts[-1][name] = weights[name]
        used += size
    return {
        f"model-{i:05d}-of-{len(parts):05d}.safetensors": part
        for i, part in enumerate(parts, start=1)
    }


def write_checkpoint(
    directory: Path,
    *,
    model: Mapping[str, torch.Tensor],
    trainer_state: Mapping[str, Any],
    tensor_files: Mapping[str, Mapping[str, torch.Tensor]],
    max_shard_bytes: int,
) -> Manifest:
    """A whole checkpoint in one directory, written with the calls the recorder makes."""
    shards = model_shards(model, max_shard_bytes)
    digests = write_files(
        directory,
        tensor_files={**shards, **tensor_files},
        json_files={TRAINER_STATE: trainer_state},
    )
    digests |= write_model_index(
        directory, {name: tensor_nbytes(part) for name, part in shards.items()}
    )
    return Manifest.from_digests(digests)


def upload_checkpoint(store: ObjectStore, directory: Path, manifest: Manifest) -> str:
    """Every file, then the manifest (the recorder's order); the manifest object's digest."""
    upload_files(store, directory, manifest.digests)
    return upload_manifest(store, manifest)


def read_tensor_files(directory: Path) -> dict[str, dict[str, torch.Tensor]]:
    """Every safetensors file of a checkpoint directory except the model shards."""
    return {
        path.name: load_file(path)
        for path in sorted(directory.glob("*.safetensors"))
        if not path.name.startswith("model-")
    }


@dataclass
class TrainedState:
    model: CausalLM
    optimizer: torch.optim.AdamW
    error_feedback: dict[str, torch.Tensor]
    trainer_state: dict[str, Any]
    tokens: torch.Tensor

    def optimizer_tensors(self) -> dict[str, torch.Tensor]:
        """AdamW state as ``<param index>.<key>``: the flat names a safetensors file holds."""
        state = self.optimizer.state_dict()["state"]
        return {
            f"{index}.{key}": value
            for index, entry in state.items()
            for key, value in entry.items()
        }


def trained_state() -> TrainedState:
    """A tiny CausalLM after one AdamW step, bfloat16 error-feedback buffers, and trainer state."""
    torch.manual_seed(0)
    model = CausalLM(CONFIG)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, CONFIG.vocab_size, (2, CONFIG.context + 1))
    language_model_loss(model(tokens[:, :-1]), tokens[:, 1:]).backward()
    optimizer.step()
    error_feedback = {
        name: torch.randn_like(p).to(torch.bfloat16)
        for name, p in model.named_parameters()
        if p.dim() == 2
    }
    trainer_state = {
        "step": 1,
        "data_cursor": {"shard": 0, "offset": 34},
        "rng": {"torch": torch.get_rng_state().tolist()},
    }
    return TrainedState(model, optimizer, error_feedback, trainer_state, tokens)


def write_trained_checkpoint(state: TrainedState, directory: Path, shards: int = 3) -> Manifest:
    weights = state.model.state_dict()
    return write_checkpoint(
        directory,
        model=weights,
        trainer_state=state.trainer_state,
        tensor_files={
            OPTIMIZER_FILE: state.optimizer_tensors(),
            ERROR_FEEDBACK_FILE: state.error_feedback,
        },
        max_shard_bytes=sum(tensor_nbytes(weights).values()) // shards + 1,
    )


def assert_bit_identical(
    actual: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]
) -> None:
    assert sorted(actual) == sorted(expected)
    for name, want in expected.items():
        got = actual[name]
        assert got.dtype == want.dtype, name
        assert got.shape == want.shape, name
        raw_got = got.contiguous().reshape(-1).view(torch.uint8)
        raw_want = want.detach().contiguous().reshape(-1).view(torch.uint8)
        assert torch.equal(raw_got, raw_want), name


def assert_checkpoint_round_trip(store: ObjectStore, tmp_path: Path) -> None:
    """Write, upload, download and load a checkpoint; everything must come back bit-exact."""
    state = trained_state()
    manifest = write_trained_checkpoint(state, tmp_path / "written")

    manifest_digest = upload_checkpoint(store, tmp_path / "written", manifest)
    downloaded = download_checkpoint(store, manifest_digest, tmp_path / "downloaded")

    assert downloaded == manifest
    assert Manifest.from_directory(tmp_path / "downloaded").root == manifest.root
    assert (tmp_path / "downloaded" / INDEX_FILE).exists()
    files = read_tensor_files(tmp_path / "downloaded")
    assert_bit_identical(files[OPTIMIZER_FILE], state.optimizer_tensors())
    assert_bit_identical(files[ERROR_FEEDBACK_FILE], state.error_feedback)
    assert json.loads((tmp_path / "downloaded" / TRAINER_STATE).read_text()) == state.trainer_state
    manifest.verify_directory(tmp_path / "downloaded")

    # Hugging Face's reader loads the shards through the index, and the loaded weights compute
    # exactly what the original model computes.
    fresh = CausalLM(CONFIG)
    load_torch_model(fresh, tmp_path / "downloaded", strict=True)
    assert_bit_identical(fresh.state_dict(), state.model.state_dict())
    with torch.no_grad():
        assert torch.equal(fresh(state.tokens[:, :-1]), state.model(state.tokens[:, :-1]))
