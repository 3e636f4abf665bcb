"""safetensors files and nested state: exact dtypes, tied and strided tensors, flattening."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from storage.checkpoint import flatten_tensors, load_tensors, save_tensors, unflatten_tensors
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

    loaded = load_tensors(tmp_path / "t.safetensors")

    assert set(loaded) == set(tensors)
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype
        assert loaded[name].shape == tensor.shape
        assert torch.equal(loaded[name], tensor)


def test_tied_and_strided_tensors_are_written_as_their_own_bytes(tmp_path: Path) -> None:
    weight = torch.randn(4, 6)
    tensors = {"embed.weight": weight, "head.weight": weight, "transposed": weight.t(), "row": weight[1]}

    save_tensors(tmp_path / "t.safetensors", tensors)
    loaded = load_tensors(tmp_path / "t.safetensors")

    for name, tensor in tensors.items():
        assert torch.equal(loaded[name], tensor), name


def test_a_file_that_is_not_safetensors_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.safetensors").write_bytes(b"\x80\x04pickle")
    with pytest.raises(CheckpointError, match="safetensors"):
        load_tensors(tmp_path / "x.safetensors")


def test_nested_state_flattens_to_dotted_names_and_back() -> None:
    state = {0: {"exp_avg": torch.ones(2), "step": torch.tensor(3.0)}, "q": {"layer": {"Q": torch.zeros(2, 1)}}}

    flat = flatten_tensors(state)

    assert sorted(flat) == ["0.exp_avg", "0.step", "q.layer.Q"]
    tree = unflatten_tensors(flat)
    assert tree["0"]["step"] is state[0]["step"]
    assert tree["q"]["layer"]["Q"] is state["q"]["layer"]["Q"]


@pytest.mark.parametrize(
    ("nested", "complaint"),
    [
        ({"lr": 0.1}, "expected a tensor at 'lr'"),
        ({"a.b": torch.ones(1)}, "without"),
        ({(1, 2): torch.ones(1)}, "str or int keys"),
    ],
)
def test_flattening_refuses_what_it_could_not_restore(nested: dict, complaint: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(CheckpointError, match=complaint):
        flatten_tensors(nested)
