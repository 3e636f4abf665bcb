"""Writing one process's checkpoint files (DESIGN.md §4) into a directory.

    model-0000s-of-0000S.safetensors ...   model weights, Hugging Face shards
    <name>.safetensors                     optimizer states, error-feedback buffers, ...
    trainer_state.json                     step, RNG states, data cursor (the caller's dict)

Each rank writes its own files; the coordinator adds ``model.safetensors.index.json``
(sharding.py) and builds the manifest from every rank's digests. JSON files are written with
sorted keys so the same state gives the same bytes (and digest); NaN and infinities are
refused because JSON has no spelling for them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from storage.checkpoint_files.manifest import validate_file_name
from storage.checkpoint_files.sharding import is_model_shard
from storage.checkpoint_files.tensors import save_tensors
from storage.errors import CheckpointError
from storage.streams import file_sha256


def write_files(
    directory: str | Path,
    *,
    tensor_files: Mapping[str, Mapping[str, torch.Tensor]] = {},
    json_files: Mapping[str, Any] = {},
) -> dict[str, str]:
    """Write safetensors and JSON files into ``directory`` (created if needed; existing
    files are never replaced) and return file name -> SHA-256 (hex) of each file written.
    This is what one rank does with its own share of a checkpoint (the coordinator then
    builds the manifest with ``Manifest.from_digests``)."""
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
