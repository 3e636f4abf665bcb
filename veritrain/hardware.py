"""The hardware class a run trained on, and the one a re-execution here would run on.

Bitwise reproduction holds only within a class (records/genesis.py ``HardwareClass``): the
same device type and GPU model, the same CPU vector instruction set, the same torch, CUDA and
cuDNN builds, and the same determinism settings. The genesis records the class as the
coordinating process sees it while training; ``veritrain reproduce`` compares it with the class
its own re-execution would run in (veritrain/audit/modes.py) and says which fields differ.
"""

from __future__ import annotations

import os
import platform

import torch

from records.genesis import DeterministicFlags, HardwareClass
from trainer.config import TrainConfig
from trainer.execution import Execution

CUBLAS_DETERMINISTIC_WORKSPACE = ":4096:8"
"""What trainer/runtime/determinism.py sets ``CUBLAS_WORKSPACE_CONFIG`` to when it is unset."""


def training_hardware(device: str, *, torch_version: str | None = None) -> HardwareClass:
    """This process's class, read from torch as it is now: called by the coordinator, whose
    determinism settings the trainer has already applied (``device``: the run's device type)."""
    cuda = device == "cuda"
    return HardwareClass(
        device=device,
        machine=platform.machine(),
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
        torch=torch_version or torch.__version__,
        gpu=torch.cuda.get_device_name() if cuda else None,
        cuda=torch.version.cuda if cuda else None,
        cudnn=_cudnn() if cuda else None,
        deterministic=DeterministicFlags(
            algorithms=torch.are_deterministic_algorithms_enabled(),
            cudnn_benchmark=bool(torch.backends.cudnn.benchmark) if cuda else None,
            cublas_workspace_config=os.environ.get("CUBLAS_WORKSPACE_CONFIG") if cuda else None,
        ),
    )


def reexecution_hardware(config: TrainConfig, execution: Execution | None = None) -> HardwareClass:
    """The class a re-execution of ``config`` (under ``execution``) would run in on this
    machine: its device as the trainer picks it, with the determinism settings the trainer's
    processes apply (trainer/runtime/determinism.py)."""
    requested = (execution.applied_to(config) if execution is not None else config).device
    cuda = requested == "cuda" or (requested == "auto" and torch.cuda.is_available())
    return HardwareClass(
        device="cuda" if cuda else "cpu",
        machine=platform.machine(),
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
        torch=torch.__version__,
        gpu=torch.cuda.get_device_name() if cuda else None,
        cuda=torch.version.cuda if cuda else None,
        cudnn=_cudnn() if cuda else None,
        deterministic=DeterministicFlags(
            algorithms=True,
            cudnn_benchmark=False if cuda else None,
            cublas_workspace_config=os.environ.get(
                "CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC_WORKSPACE
            )
            if cuda
            else None,
        ),
    )


def _cudnn() -> str | None:
    version = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
    return None if version is None else str(version)
