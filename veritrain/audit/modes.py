"""Which rule a re-execution is judged by, and why (docs/auditing.md, "Reproduce").

* ``bitwise``: the genesis' policy says bitwise, this machine's re-execution runs in the
  recorded hardware class (veritrain/hardware.py) and with the recorded precision and thread
  count: every digest must match.
* ``tolerance``: otherwise -- a tolerance policy, another hardware class, or an auditor who
  re-executes under other settings (``--precision``, ``--threads``) to emulate other
  hardware: the policy's fallback applies (metric within its delta, every parameter tensor and
  every commitment within its relative distance).
* ``tolerance`` across precisions: when exactly one of the record and the re-execution runs
  bf16 autocast, eight significant bits make tensors whose update is mostly rounding noise
  drift by a large share of it (attention key biases: softmax ignores a shift shared by all
  keys, so their true gradient is zero). Per-tensor distances then say nothing, so parameters
  and contributions are measured a stage (and the whole model) at a time, against the
  published cross-precision bound, and the metric -- itself evaluated at another precision --
  is reported, not judged (``veritrain bench audit`` measures both regimes).
* the same regime for a bf16 run re-executed at bf16 on another kind of device (a CUDA-recorded
  step on a CPU, or the reverse): each device rounds its own bf16 products, accumulated in its
  own order, so the two drift apart as far as two precisions do. Measured on an H200 (issue 22,
  docs/benchmarks.md "On a GPU"): a tiny bf16 step recorded on CUDA and re-executed on a CPU
  stayed within 0.0057 on commitments but reached 0.01-0.1 on single tensors and 0.0115 on
  ``eval_loss``, while the same step re-executed on the recording GPU was bit-equal.

An auditor may also demand one rule (``--mode bitwise|tolerance``): a bitwise comparison
across hardware classes is expected to fail, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from records import Genesis
from records.genesis import Tolerance
from trainer.config import TrainConfig
from trainer.execution import Execution
from veritrain.hardware import (
    hardware_differences,
    outside_class_warning,
    reexecution_hardware,
)
from veritrain.policy import CROSS_PRECISION_DISTANCE_BOUND

Rule = Literal["bitwise", "tolerance"]
Requested = Literal["auto", "bitwise", "tolerance"]
Granularity = Literal["tensor", "stage"]


@dataclass(frozen=True)
class ModeChoice:
    mode: Rule
    reason: str
    bound: float
    """The relative parameter distance a tolerance comparison holds to."""
    granularity: Granularity = "tensor"
    """``tensor``: each tensor on its own; ``stage``: a stage's (or the model's) tensors at once."""
    judge_metric: bool = True
    """Whether the policy's metric is judged (not across precisions)."""
    warning: str | None = None
    """Said loudly when this machine is outside the run's hardware class (whatever the rule)."""


def reexecuted_precision(config: TrainConfig, execution: Execution | None) -> str:
    """The precision a re-execution of ``config`` (under ``execution``) runs at."""
    return execution.applied_to(config).precision if execution is not None else config.precision


def crosses_precision(config: TrainConfig, execution: Execution | None) -> bool:
    """Whether exactly one of the record and the re-execution runs bf16 autocast."""
    return (config.precision == "bf16") != (reexecuted_precision(config, execution) == "bf16")


def bf16_across_devices(
    genesis: Genesis, config: TrainConfig, execution: Execution | None
) -> tuple[str, str] | None:
    """(recorded device, this re-execution's device) when a bf16 run is re-executed at bf16 on
    another kind of device; None otherwise."""
    if config.precision != "bf16" or reexecuted_precision(config, execution) != "bf16":
        return None
    there = genesis.verification_policy.hardware.device
    here = reexecution_hardware(config, execution).device
    return None if there == here else (there, here)


def choose_mode(
    genesis: Genesis,
    config: TrainConfig,
    execution: Execution | None = None,
    requested: Requested = "auto",
) -> ModeChoice:
    choice = _choose(genesis, config, execution, requested)
    signed = all(k.hardware is not None for k in genesis.keys.clusters)
    warning = outside_class_warning(
        genesis.verification_policy.hardware,
        reexecution_hardware(config, execution),
        signed=signed,
    )
    return replace(choice, warning=warning)


def _choose(
    genesis: Genesis,
    config: TrainConfig,
    execution: Execution | None,
    requested: Requested,
) -> ModeChoice:
    policy = genesis.verification_policy
    fallback = policy.fallback
    bound = fallback.parameter_distance
    rule = describe(fallback)
    if requested != "bitwise":
        # bf16 rounding drifts as far across device kinds as across precisions (module docstring)
        why = None
        if crosses_precision(config, execution):
            why = (
                f"the run trained at {config.precision} and this re-execution runs at "
                f"{reexecuted_precision(config, execution)}: across precisions"
            )
        elif (devices := bf16_across_devices(genesis, config, execution)) is not None:
            there, here = devices
            why = (
                f"the run trained at bf16 on {there} and this re-execution runs bf16 on {here}: "
                "each device rounds its own bf16 products, so as across precisions"
            )
        if why is not None:
            return ModeChoice(
                "tolerance",
                f"{why} parameters and contributions are judged a stage at a time within the "
                f"published bound {CROSS_PRECISION_DISTANCE_BOUND}, commitments within it, and "
                f"{fallback.metric} is reported, not judged",
                CROSS_PRECISION_DISTANCE_BOUND,
                granularity="stage",
                judge_metric=False,
            )
    if requested == "tolerance":
        return ModeChoice("tolerance", f"tolerance requested (--mode tolerance): {rule}", bound)
    differences = hardware_differences(policy.hardware, reexecution_hardware(config, execution))
    differences += [
        f"re-executed with {d}" for d in (execution.differences(config) if execution else [])
    ]
    elsewhere = "; ".join(differences) or "none"
    if requested == "bitwise":
        return ModeChoice(
            "bitwise",
            "bitwise requested (--mode bitwise); differences from the recorded hardware class and "
            f"settings: {elsewhere}",
            bound,
        )
    if policy.mode != "bitwise":
        return ModeChoice("tolerance", f"the genesis fixed a tolerance policy ({rule})", bound)
    if differences:
        return ModeChoice(
            "tolerance",
            "the genesis fixed bitwise on its hardware class, but this re-execution differs "
            f"({elsewhere}): falling back to its tolerance ({rule})",
            bound,
        )
    hardware = policy.hardware
    model = hardware.gpu or f"{hardware.machine}/{hardware.cpu_capability}"
    where = f"{hardware.device} {model}, torch {hardware.torch}"
    return ModeChoice(
        "bitwise",
        f"the genesis fixed bitwise, and this machine is in its hardware class ({where}); "
        "re-executed with the recorded settings",
        bound,
    )


def describe(tolerance: Tolerance) -> str:
    return (
        f"{tolerance.metric} within {tolerance.delta}, every parameter tensor and commitment "
        f"within a relative distance of {tolerance.parameter_distance}"
    )
