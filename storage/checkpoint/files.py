"""A checkpoint as a directory of files (DESIGN.md §4), written and read back.

    model-00001-of-0000N.safetensors ...   model weights, Hugging Face shards
    model.safetensors.index.json           their index
    <name>.safetensors                     optimizer states, error-feedback buffers, ...
    trainer_state.json                     step, RNG states, data cursor (the caller's dict)

Writing returns the :class:`Manifest` of the directory; reading can check the files against
a manifest first. JSON files are written with sorted keys so the same state gives the same
bytes (and digest); NaN and infinities are refused because JSON has no spelling for them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from storage.checkpoint.manifest import Manifest, validate_file_name
from storage.checkpoint.sharding import (
    DEFAULT_MAX_SHARD_BYTES,
    INDEX_FILE,
    is_model_shard,
    load_model,
    read_model_index,
    write_model,
)
from storage.checkpoint.tensors import load_tensors, save_tensors
from storage.errors import CheckpointError
from storage.streams import file_sha256

TRAINER_STATE_FILE = "trainer_state.json"


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint loaded back from its files."""

    model: dict[str, torch.Tensor]
    """The model's state dict (every tensor named in the index)."""
    tensor_files: dict[str, dict[str, torch.Tensor]]
    """Other safetensors files by file name (e.g. ``"optimizer-inner.safetensors"``)."""
    json_files: dict[str, Any]
    """JSON files by file name, ``trainer_state.json`` among them."""

    @property
    def trainer_state(self) -> Any:
        return self.json_files[TRAINER_STATE_FILE]


def write_files(
    directory: str | Path,
    *,
    tensor_files: Mapping[str, Mapping[str, torch.Tensor]] = {},
    json_files: Mapping[str, Any] = {},
) -> dict[str, str]:
    """Write safetensors and JSON files into ``directory`` (created if needed; existing
    files are never replaced) and return file name -> SHA-256 (hex) of each file written.
    This is what one rank does with its own share of a checkpoint (the coordinator then
    builds the manifest with ``Manifest.from_digests``); :func:`write_checkpoint` builds a
    whole checkpoint on top of it."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    for name, tensors in tensor_files.items():
        if not validate_file_name(name).endswith(".safetensors"):
            raise CheckpointError(f"expected a .safetensors name for tensors, got {name!r}")
        path = _new_file(root, name)
        # Hugging Face loaders refuse model shards without the "format": "pt" metadata.
        save_tensors(path, tensors, metadata={"format": "pt"} if is_model_shard(name) else None)
        written[name] = file_sha256(path)[0]
    for name, value in json_files.items():
        if not validate_file_name(name).endswith(".json"):
            raise CheckpointError(f"expected a .json name for JSON data, got {name!r}")
        path = _new_file(root, name)
        path.write_text(_json_text(name, value), encoding="utf-8")
        written[name] = file_sha256(path)[0]
    return written


def write_checkpoint(
    directory: str | Path,
    *,
    model: Mapping[str, torch.Tensor],
    trainer_state: Mapping[str, Any],
    tensor_files: Mapping[str, Mapping[str, torch.Tensor]] = {},
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
) -> Manifest:
    """Write a whole checkpoint into ``directory``, which must not exist or be empty, and
    return its manifest. ``tensor_files`` maps file names such as
    ``"optimizer-inner.safetensors"`` to flat tensor dicts (see ``flatten_tensors``)."""
    root = Path(directory)
    if root.exists() and any(root.iterdir()):
        raise CheckpointError(f"expected an empty or new directory for the checkpoint, got {root} with files")
    for name in tensor_files:
        if is_model_shard(name) or name == INDEX_FILE:
            raise CheckpointError(f"expected {name!r} to be left to the model's shards, got it in tensor_files")
    root.mkdir(parents=True, exist_ok=True)
    write_model(root, model, max_shard_bytes=max_shard_bytes)
    write_files(root, tensor_files=tensor_files, json_files={TRAINER_STATE_FILE: dict(trainer_state)})
    return Manifest.from_directory(root)


def load_checkpoint(directory: str | Path, *, manifest: Manifest | None = None) -> Checkpoint:
    """Load a checkpoint directory. With ``manifest``, first check that the directory holds
    exactly its files with its digests (:class:`IntegrityError` otherwise)."""
    root = Path(directory)
    if manifest is not None:
        manifest.verify_directory(root)
    weight_map, _ = read_model_index(root)
    shards = set(weight_map.values())
    tensor_files: dict[str, dict[str, torch.Tensor]] = {}
    json_files: dict[str, Any] = {}
    for path in sorted(root.iterdir()):
        name = validate_file_name(path.name)
        if name in shards or name == INDEX_FILE:
            continue
        if name.endswith(".safetensors"):
            if is_model_shard(name):
                raise CheckpointError(f"expected every model shard in {INDEX_FILE}, {name} is not")
            tensor_files[name] = load_tensors(path)
        elif name.endswith(".json"):
            try:
                json_files[name] = json.loads(path.read_bytes())
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise CheckpointError(f"expected JSON in {path}: {exc}") from exc
    if TRAINER_STATE_FILE not in json_files:
        raise CheckpointError(f"expected {TRAINER_STATE_FILE} in {root}, found none")
    return Checkpoint(model=load_model(root), tensor_files=tensor_files, json_files=json_files)


def _new_file(root: Path, name: str) -> Path:
    path = root / name
    if path.exists():
        raise CheckpointError(f"expected {path} not to exist (checkpoint files are written once)")
    return path


def _json_text(name: str, value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, indent=2, allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"expected JSON-able data for {name}: {exc}") from exc
