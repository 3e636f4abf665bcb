"""A second device for CPU-only CI: PyTorch's ``meta`` device stands for the accelerator.

Tensors on ``meta`` have shapes and dtypes but no data, and PyTorch refuses an operation that
mixes them with CPU tensors exactly as it refuses one that mixes ``cuda:0`` and ``cpu``
("Expected all tensors to be on the same device" / "... is not on the expected device meta!").
A parameter left on the training device where the code expected the host -- or the other way
round -- fails here as it fails on a GPU.

What ``meta`` cannot do is give data back: :class:`FakeAccelerator` plays the device-to-host
copy, answering a copy (``.to("cpu")``, ``.cpu()``, ``copy_`` into a CPU tensor) or a scalar
read (``.item()``) of a meta tensor with zeros, and an explicit ``copy_`` onto the device (which
has nothing to write) with its target. Every other operation runs as PyTorch runs it.
Values are not the point: the device each tensor lives on is.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ACCELERATOR = torch.device("meta")

_aten = torch.ops.aten


class FakeAccelerator(TorchDispatchMode):
    """Within ``with FakeAccelerator():`` meta tensors can be copied to the host (as zeros)."""

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is _aten._to_copy.default and _on_meta(args[0]):
            target = kwargs.get("device") or args[0].device
            if torch.device(target).type != "meta":
                dtype = kwargs.get("dtype") or args[0].dtype
                return torch.zeros(args[0].shape, dtype=dtype, device=target)
        if func is _aten.copy_.default and not _on_meta(args[0]) and _on_meta(args[1]):
            return args[0].zero_()
        if func is _aten.copy_.default and _on_meta(args[0]):  # to the device: no data to write
            return args[0]
        if func is _aten._local_scalar_dense.default and _on_meta(args[0]):
            return torch.zeros((), dtype=args[0].dtype).item()
        return func(*args, **kwargs)


def _on_meta(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "meta"
