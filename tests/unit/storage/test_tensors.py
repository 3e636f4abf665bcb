"""safetensors files as the checkpoint writer saves them: exact dtypes, tied and strided
tensors. (They are read back with safetensors' own reader, as every consumer does.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from storage.checkpoint_files import save_tensors
from storage.errors import CheckpointError


def test_every_dtype_and_shape_comes_back_bit_exactly(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(0)
    base = torch.randn(3, 5, generator=generator)
    tensors = {
        "f32": base,
        "bf16": base.to(torch.bfloat16),
        "f16": base.to(torch.float16),
        "i64": torch.arange(7),
        "u8": torch.tensor([0, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False]),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
    }
    save_tensors(tmp_path / "t.safetensors", tensors)

    loaded = load_file(tmp_path / "t.safetensors")

    assert set(loaded) == set(tensors)
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype
        assert loaded[name].shape == tensor.shape
        assert torch.equal(loaded[name], tensor)


def test_tied_and_strided_tensors_are_written_as_their_own_bytes(tmp_path: Path) -> None:
    weight = torch.randn(4, 6)
    tensors = {
        "embed.weight": weight,
        "head.weight": weight,
        "transposed": weight.t(),
        "row": weight[1],
    }

    save_tensors(tmp_path / "t.safetensors", tensors)
    loaded = load_file(tmp_path / "t.safetensors")

    for name, tensor in tensors.items():
        assert torch.equal(loaded[name], tensor), name


@pytest.mark.parametrize(("name", "value"), [("", torch.ones(1)), ("lr", 0.1)])
def test_what_safetensors_cannot_hold_is_refused_by_name(
    tmp_path: Path, name: str, value: object
) -> None:
    with pytest.raises(CheckpointError, match="expected"):
        save_tensors(tmp_path / "t.safetensors", {name: value})  # type: ignore[dict-item]
    assert not (tmp_path / "t.safetensors").exists()
