"""Named tensors in safetensors files: writing, reading, and flattening nested state.

safetensors (https://github.com/huggingface/safetensors) stores a JSON header of names,
dtypes, shapes and offsets followed by the raw little-endian bytes, so loading is exact for
every dtype (bfloat16 included) and can never execute code -- unlike pickle/``torch.load``,
which this project never uses for anything public.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from storage.errors import CheckpointError

NestedTensors = Mapping[Any, "torch.Tensor | NestedTensors"]
"""A tree of mappings whose leaves are tensors (e.g. an optimizer's per-parameter state)."""


def save_tensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, torch.Tensor],
    *,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``tensors`` to a safetensors file.

    Tensors are written from CPU copies where needed: a tensor on another device, a
    non-contiguous view, or one sharing memory with a tensor already written (tied weights)
    is copied, since the format stores each name's bytes on their own. Loading gives back
    independent tensors; ``Module.load_state_dict`` copies into the tied parameter, so the
    tie survives a round trip.
    """
    prepared: dict[str, torch.Tensor] = {}
    seen_storages: set[int] = set()
    for name, tensor in tensors.items():
        if not isinstance(name, str) or not name:
            raise CheckpointError(f"expected non-empty string tensor names, got {name!r}")
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"expected a tensor for {name!r}, got {type(tensor).__name__}")
        if tensor.is_sparse or tensor.layout != torch.strided:
            raise CheckpointError(f"expected a dense (strided) tensor for {name!r}, got {tensor.layout}")
        cpu = tensor.detach().cpu()
        storage = cpu.untyped_storage().data_ptr()
        if storage in seen_storages and cpu.numel() > 0:
            cpu = cpu.clone(memory_format=torch.contiguous_format)
        elif not cpu.is_contiguous():
            cpu = cpu.contiguous()
        seen_storages.add(cpu.untyped_storage().data_ptr())
        prepared[name] = cpu
    try:
        save_file(prepared, path, metadata=dict(metadata) if metadata is not None else None)
    except (SafetensorError, ValueError) as exc:
        raise CheckpointError(f"could not write {os.fspath(path)}: {exc}") from exc


def load_tensors(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Read every tensor of a safetensors file onto the CPU, bit-exactly."""
    try:
        return load_file(path, device="cpu")
    except (SafetensorError, ValueError, OSError) as exc:
        raise CheckpointError(f"expected a safetensors file at {os.fspath(path)}: {exc}") from exc


def flatten_tensors(nested: NestedTensors, *, sep: str = ".") -> dict[str, torch.Tensor]:
    """Flatten a tree of mappings into ``{"a.b.c": tensor}``; integer keys (parameter ids in
    an optimizer's ``state``) become their decimal strings. A key containing ``sep`` or a leaf
    that is not a tensor (hyperparameters: put those in JSON) raises :class:`CheckpointError`."""
    flat: dict[str, torch.Tensor] = {}

    def visit(node: Any, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(key, bool) or not isinstance(key, str | int):
                raise CheckpointError(f"expected str or int keys, got {key!r} under {prefix!r}")
            part = str(key)
            if not part or sep in part:
                raise CheckpointError(f"expected keys without {sep!r}, got {part!r} under {prefix!r}")
            name = f"{prefix}{sep}{part}" if prefix else part
            if isinstance(value, torch.Tensor):
                flat[name] = value
            elif isinstance(value, Mapping):
                visit(value, name)
            else:
                raise CheckpointError(f"expected a tensor at {name!r}, got {type(value).__name__}")

    visit(nested, "")
    return flat


def unflatten_tensors(flat: Mapping[str, torch.Tensor], *, sep: str = ".") -> dict[str, Any]:
    """Undo :func:`flatten_tensors`: ``{"a.b": t}`` -> ``{"a": {"b": t}}``. Keys come back as
    strings (an integer key ``0`` is ``"0"``)."""
    tree: dict[str, Any] = {}
    for name, tensor in flat.items():
        *parents, leaf = name.split(sep)
        node = tree
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise CheckpointError(f"expected {part!r} to be a group in {name!r}, it is a tensor")
            node = child
        if leaf in node:
            raise CheckpointError(f"expected {name!r} to be a tensor, it is a group")
        node[leaf] = tensor
    return tree
