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
from collections.abc import Mapping
from typing import Any

import torch

from records.genesis import DeterministicFlags, HardwareClass
from trainer.config import TrainConfig
from trainer.execution import Execution
from trainer.runtime.determinism import CUBLAS_DETERMINISTIC_WORKSPACE


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
    # A machine without CUDA is outside a CUDA class whatever was requested (and cannot name a GPU).
    cuda = requested in ("cuda", "auto") and torch.cuda.is_available()
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


def hardware_differences(
    recorded: HardwareClass,
    other: HardwareClass | None,
    *,
    labels: tuple[str, str] = ("there", "here"),
) -> list[str]:
    """Every field in which ``other`` is outside ``recorded``'s class, e.g.
    ``gpu 'Z9000' there, 'NVIDIA H100 80GB HBM3' here`` (``labels`` name the two sides)."""
    if other is None:
        return [f"no hardware class {labels[1]}"]
    return _differences(recorded.to_payload(), other.to_payload(), labels)


def outside_class_warning(
    recorded: HardwareClass, here: HardwareClass, *, signed: bool
) -> str | None:
    """What ``veritrain verify`` and ``reproduce`` print (a ``WARNING`` line, and in ``--json``)
    when a re-execution on this machine cannot be inside the run's class ``recorded``;
    ``signed``: whether the run's clusters signed that class at enrolment. None when it can."""
    differences = hardware_differences(recorded, here)
    if not differences:
        return None
    model = recorded.gpu or f"{recorded.machine}/{recorded.cpu_capability}"
    return (
        f"this machine is outside the run's hardware class ({recorded.device} {model}, torch "
        f"{recorded.torch}): {'; '.join(differences)}. No re-execution here can be compared "
        "bitwise; `veritrain reproduce` here judges by the policy's tolerance"
        + (
            ""
            if signed
            else ". No cluster signed this class (the run was recorded before enrolments named "
            "one): nothing shows that anyone has it"
        )
    )


def _differences(
    recorded: Mapping[str, Any], other: Mapping[str, Any], labels: tuple[str, str], prefix: str = ""
) -> list[str]:
    found: list[str] = []
    for key in sorted(set(recorded) | set(other)):
        there, mine = recorded.get(key), other.get(key)
        if isinstance(there, Mapping) and isinstance(mine, Mapping):
            found += _differences(there, mine, labels, f"{prefix}{key}.")
        elif there != mine:
            found.append(f"{prefix}{key} {there!r} {labels[0]}, {mine!r} {labels[1]}")
    return found


def _cudnn() -> str | None:
    version = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
    return None if version is None else str(version)
