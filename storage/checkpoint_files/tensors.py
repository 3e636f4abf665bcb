"""Named tensors written as safetensors files.

safetensors (https://github.com/huggingface/safetensors) stores a JSON header of names,
dtypes, shapes and offsets followed by the raw little-endian bytes, so loading is exact for
every dtype (bfloat16 included) and can never execute code -- unlike pickle/``torch.load``,
which this project never uses for anything public.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from storage.errors import CheckpointError


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
            raise CheckpointError(
                f"expected a dense (strided) tensor for {name!r}, got {tensor.layout}"
            )
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
