"""A small transformer's checkpoint through a store and back, shared by the local-store
unit test and the S3 integration test."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from storage import ObjectStore
from storage.checkpoint import (
    Checkpoint,
    Manifest,
    download_checkpoint,
    flatten_tensors,
    load_checkpoint,
    tensor_nbytes,
    upload_checkpoint,
    write_checkpoint,
)
from trainer.model import CausalLM, ModelConfig, language_model_loss

CONFIG = ModelConfig(vocab_size=64, context=16, num_hidden_layers=2, hidden_size=32,
                     intermediate_size=64, num_attention_heads=2, num_key_value_heads=2)
OPTIMIZER_FILE = "optimizer-inner.safetensors"
ERROR_FEEDBACK_FILE = "error-feedback.safetensors"


@dataclass
class TrainedState:
    model: CausalLM
    optimizer: torch.optim.AdamW
    error_feedback: dict[str, torch.Tensor]
    trainer_state: dict[str, Any]
    tokens: torch.Tensor


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
            OPTIMIZER_FILE: flatten_tensors(state.optimizer.state_dict()["state"]),
            ERROR_FEEDBACK_FILE: state.error_feedback,
        },
        max_shard_bytes=sum(tensor_nbytes(weights).values()) // shards + 1,
    )


def assert_bit_identical(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert sorted(actual) == sorted(expected)
    for name, want in expected.items():
        got = actual[name]
        assert got.dtype == want.dtype, name
        assert got.shape == want.shape, name
        raw_got = got.contiguous().reshape(-1).view(torch.uint8)
        raw_want = want.detach().contiguous().reshape(-1).view(torch.uint8)
        assert torch.equal(raw_got, raw_want), name


def assert_checkpoint_round_trip(store: ObjectStore, tmp_path: Path) -> Checkpoint:
    """Write, upload, download and load a checkpoint; everything must come back bit-exact."""
    state = trained_state()
    manifest = write_trained_checkpoint(state, tmp_path / "written")

    manifest_digest = upload_checkpoint(store, tmp_path / "written")
    downloaded = download_checkpoint(store, manifest_digest, tmp_path / "downloaded")

    assert downloaded == manifest
    assert Manifest.from_directory(tmp_path / "downloaded").root == manifest.root
    loaded = load_checkpoint(tmp_path / "downloaded", manifest=manifest)

    assert_bit_identical(loaded.model, state.model.state_dict())
    assert_bit_identical(
        loaded.tensor_files[OPTIMIZER_FILE], flatten_tensors(state.optimizer.state_dict()["state"])
    )
    assert_bit_identical(loaded.tensor_files[ERROR_FEEDBACK_FILE], state.error_feedback)
    assert loaded.trainer_state == state.trainer_state

    # The loaded weights compute exactly what the original model computes.
    fresh = CausalLM(CONFIG)
    fresh.load_state_dict(loaded.model, strict=True)
    with torch.no_grad():
        assert torch.equal(fresh(state.tokens[:, :-1]), state.model(state.tokens[:, :-1]))
    return loaded
