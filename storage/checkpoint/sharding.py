"""Model weights as Hugging Face sharded safetensors: ``model-00001-of-00003.safetensors``
... plus ``model.safetensors.index.json``.

The index is the one transformers and huggingface_hub read (``load_torch_model``,
``from_pretrained``): ``{"metadata": {"total_size": N}, "weight_map": {tensor name: shard
file}}``, where total_size is the sum of the tensors' byte sizes (headers excluded) and
every tensor is mapped to the one shard that holds it. An index is written even for a
single shard, so readers always find the weights the same way.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from storage.checkpoint.manifest import validate_file_name
from storage.checkpoint.tensors import load_tensors, save_tensors
from storage.errors import CheckpointError
from storage.streams import file_sha256

INDEX_FILE = "model.safetensors.index.json"
DEFAULT_MAX_SHARD_BYTES = 2 << 30
"""2 GiB of tensor bytes per shard (Hugging Face's own default is 5 GB; smaller shards
download and verify in parallel and bound memory while writing)."""

SHARD_NAME = re.compile(r"model-(\d{5})-of-(\d{5})\.safetensors")


def shard_file_name(index: int, count: int) -> str:
    """``model-0000<index>-of-0000<count>.safetensors``, 1-based, as Hugging Face names shards."""
    if not 1 <= index <= count <= 99_999:
        raise CheckpointError(f"expected 1 <= index <= count <= 99999, got index={index}, count={count}")
    return f"model-{index:05d}-of-{count:05d}.safetensors"


def tensor_nbytes(tensors: Mapping[str, torch.Tensor]) -> dict[str, int]:
    """Name -> bytes the tensor occupies in a safetensors file (small enough to gather from
    every rank when each writes its own shard)."""
    return {name: t.numel() * t.element_size() for name, t in tensors.items()}


def plan_shards(tensors: Mapping[str, torch.Tensor], max_shard_bytes: int) -> list[list[str]]:
    """Split tensor names, in order, into consecutive shards of at most ``max_shard_bytes``
    (a tensor larger than that gets a shard of its own). An empty model gives one empty shard."""
    if max_shard_bytes <= 0:
        raise CheckpointError(f"expected max_shard_bytes > 0, got {max_shard_bytes}")
    shards: list[list[str]] = [[]]
    used = 0
    for name, size in tensor_nbytes(tensors).items():
        if shards[-1] and used + size > max_shard_bytes:
            shards.append([])
            used = 0
        shards[-1].append(name)
        used += size
    return shards


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
                raise CheckpointError(f"expected {name!r} in one shard, got {weight_map[name]} and {shard}")
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
        raise CheckpointError(f"expected a safetensors header with data_offsets, got a malformed one: {exc!r}") from exc


def write_model_index(directory: str | Path, shards: Mapping[str, Mapping[str, int]]) -> dict[str, str]:
    """Write ``model.safetensors.index.json`` for the given shards (shard file -> {tensor
    name: byte size}, see :func:`tensor_nbytes`); return {its file name: its SHA-256}."""
    text = json.dumps(model_index(shards), indent=2, sort_keys=True) + "\n"
    Path(directory).mkdir(parents=True, exist_ok=True)
    path = Path(directory) / INDEX_FILE
    try:
        with open(path, "x", encoding="utf-8") as f:  # written once, like every checkpoint file
            f.write(text)
    except FileExistsError as exc:
        raise CheckpointError(f"expected {path} not to exist (checkpoint files are written once)") from exc
    return {INDEX_FILE: file_sha256(path)[0]}


def write_model(
    directory: str | Path,
    state: Mapping[str, torch.Tensor],
    *,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
) -> dict[str, str]:
    """Write a model's state dict as shards plus the index; return file name -> SHA-256 of
    every file written."""
    plan = plan_shards(state, max_shard_bytes)
    written: dict[str, str] = {}
    shards: dict[str, dict[str, int]] = {}
    for number, tensor_names in enumerate(plan, start=1):
        shard = shard_file_name(number, len(plan))
        part = {name: state[name] for name in tensor_names}
        path = Path(directory) / shard
        # "format": "pt" is the metadata transformers expects on PyTorch safetensors files.
        save_tensors(path, part, metadata={"format": "pt"})
        shards[shard] = tensor_nbytes(part)
        written[shard] = file_sha256(path)[0]
    return written | write_model_index(directory, shards)


def read_model_index(directory: str | Path) -> tuple[dict[str, str], int]:
    """The weight map and total_size of a directory's index, checked for shape and safe
    shard names."""
    path = Path(directory) / INDEX_FILE
    try:
        index = json.loads(path.read_bytes())
    except FileNotFoundError as exc:
        raise CheckpointError(f"expected {INDEX_FILE} in {directory}, found none") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"expected JSON in {path}: {exc}") from exc
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    metadata = index.get("metadata") if isinstance(index, dict) else None
    total_size = metadata.get("total_size") if isinstance(metadata, dict) else None
    if not isinstance(weight_map, dict) or not isinstance(total_size, int):
        raise CheckpointError(f"expected {{'metadata': {{'total_size': int}}, 'weight_map': {{...}}}} in {path}")
    for shard in set(weight_map.values()):
        if not isinstance(shard, str) or not shard.endswith(".safetensors"):
            raise CheckpointError(f"expected .safetensors shard names in {path}, got {shard!r}")
        validate_file_name(shard)
    return weight_map, total_size


def load_model(directory: str | Path) -> dict[str, torch.Tensor]:
    """Load every shard the index names; each shard must hold exactly the tensors the index
    maps to it, and total_size must equal their byte sum."""
    weight_map, total_size = read_model_index(directory)
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        tensors = load_tensors(Path(directory) / shard)
        expected = {name for name, file in weight_map.items() if file == shard}
        if set(tensors) != expected:
            raise CheckpointError(
                f"expected {shard} to hold {sorted(expected)}, got {sorted(tensors)}"
            )
        state.update(tensors)
    total = sum(tensor_nbytes(state).values())
    if total != total_size:
        raise CheckpointError(f"expected total_size {total} in {INDEX_FILE}, got {total_size}")
    return {name: state[name] for name in sorted(state)}


def is_model_shard(name: str) -> bool:
    """Whether a file name is a Hugging Face model shard name."""
    match = SHARD_NAME.fullmatch(name)
    return match is not None and 1 <= int(match.group(1)) <= int(match.group(2))

