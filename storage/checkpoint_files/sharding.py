"""Model weights as Hugging Face sharded safetensors: ``model-00001-of-00003.safetensors``
... plus ``model.safetensors.index.json``.

The index is the one transformers and huggingface_hub read (``load_torch_model``,
``from_pretrained``): ``{"metadata": {"total_size": N}, "weight_map": {tensor name: shard
file}}``, where total_size is the sum of the tensors' byte sizes (headers excluded) and
every tensor is mapped to the one shard that holds it. An index is written even for a
single shard, so readers always find the weights the same way. Each rank writes its own shard
(files.py); the coordinator writes the index from every rank's ``tensor_nbytes``.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from storage.checkpoint_files.manifest import validate_file_name
from storage.errors import CheckpointError
from storage.streams import file_sha256

INDEX_FILE = "model.safetensors.index.json"

SHARD_NAME = re.compile(r"model-(\d{5})-of-(\d{5})\.safetensors")


def tensor_nbytes(tensors: Mapping[str, torch.Tensor]) -> dict[str, int]:
    """Name -> bytes the tensor occupies in a safetensors file (small enough to gather from
    every rank when each writes its own shard)."""
    return {name: t.numel() * t.element_size() for name, t in tensors.items()}


def model_index(shards: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    """The index for shard file -> {tensor name: byte size}; a name in two shards is refused."""
    weight_map: dict[str, str] = {}
    total_size = 0
    for shard, sizes in shards.items():
        validate_file_name(shard)
        if not shard.endswith(".safetensors"):
            raise CheckpointError(f"expected a .safetensors shard name, got {shard!r}")
        for name, size in sizes.items():
            if name in weight_map:
                raise CheckpointError(
                    f"expected {name!r} in one shard, got {weight_map[name]} and {shard}"
                )
            weight_map[name] = shard
            total_size += size
    return {"metadata": {"total_size": total_size}, "weight_map": dict(sorted(weight_map.items()))}


def header_tensor_sizes(read: Callable[[int, int], bytes]) -> dict[str, int]:
    """Tensor name -> byte size from a safetensors file's header alone, read through
    ``read(start, end)`` (an 8-byte little-endian header length, then that many bytes of JSON:
    the safetensors format), so the index of stored shards is written without loading them."""
    (length,) = struct.unpack("<Q", read(0, 8))
    header = json.loads(read(8, 8 + length))
    try:
        return {
            name: int(entry["data_offsets"][1]) - int(entry["data_offsets"][0])
            for name, entry in header.items()
            if name != "__metadata__"
        }
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CheckpointError(
            f"expected a safetensors header with data_offsets, got a malformed one: {exc!r}"
        ) from exc


def write_model_index(
    directory: str | Path, shards: Mapping[str, Mapping[str, int]]
) -> dict[str, str]:
    """Write ``model.safetensors.index.json`` for the given shards (shard file -> {tensor
    name: byte size}, see :func:`tensor_nbytes`); return {its file name: its SHA-256}."""
    text = json.dumps(model_index(shards), indent=2, sort_keys=True) + "\n"
    Path(directory).mkdir(parents=True, exist_ok=True)
    path = Path(directory) / INDEX_FILE
    try:
        with open(path, "x", encoding="utf-8") as f:  # written once, like every checkpoint file
            f.write(text)
    except FileExistsError as exc:
        raise CheckpointError(
            f"expected {path} not to exist (checkpoint files are written once)"
        ) from exc
    return {INDEX_FILE: file_sha256(path)[0]}


def is_model_shard(name: str) -> bool:
    """Whether a file name is a Hugging Face model shard name."""
    match = SHARD_NAME.fullmatch(name)
    return match is not None and 1 <= int(match.group(1)) <= int(match.group(2))
