"""What a run's precision (``TrainConfig.precision``) means for tensors: the dtype parameters
are held in, and the context forward passes run in. One home, because the inner steps, the
pipeline's evaluation, the memory bench and the verdicts' replay in verify must agree bit for
bit."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # trainer.config imports trainer.outer
    from trainer.config import Precision


def parameter_dtype(precision: Precision) -> torch.dtype:
    """The dtype parameters (and so gradients and optimiser states) are held in."""
    return torch.float64 if precision == "fp64" else torch.float32


def autocast(precision: Precision, device: torch.device) -> contextlib.AbstractContextManager[None]:
    """The context the forward and backward passes run in: bf16 autocast on ``device``'s type
    for ``bf16``, nothing otherwise."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
