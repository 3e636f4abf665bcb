"""Which rule a re-execution is judged by, and why (docs/auditing.md, "Reproduce").

* ``bitwise``: the genesis' policy says bitwise, this machine's re-execution runs in the
  recorded hardware class (veritrain/hardware.py) and with the recorded precision and thread
  count: every digest must match.
* ``tolerance``: otherwise -- a tolerance policy, another hardware class, or an auditor who
  re-executes under other settings (``--precision``, ``--threads``) to emulate other
  hardware: the policy's fallback applies (metric within its delta, every parameter tensor and
  every commitment within its relative distance).

An auditor may also demand one rule (``--mode bitwise|tolerance``): a bitwise comparison
across hardware classes is expected to fail, and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from records import Genesis
from records.genesis import Tolerance
from trainer.config import TrainConfig
from trainer.execution import Execution
from veritrain.hardware import reexecution_hardware

Rule = Literal["bitwise", "tolerance"]
Requested = Literal["auto", "bitwise", "tolerance"]


@dataclass(frozen=True)
class ModeChoice:
    mode: Rule
    reason: str
    bound: float
    """The relative parameter distance of the genesis' tolerance (used under tolerance)."""


def choose_mode(
    genesis: Genesis, config: TrainConfig, execution: Execution | None = None, requested: Requested = "auto"
) -> ModeChoice:
    policy = genesis.verification_policy
    fallback = policy.fallback
    bound = fallback.parameter_distance
    rule = describe(fallback)
    if requested == "tolerance":
        return ModeChoice("tolerance", f"tolerance requested (--mode tolerance): {rule}", bound)
    differences = _differences(policy.hardware.to_payload(), reexecution_hardware(config, execution).to_payload())
    differences += [f"re-executed with {d}" for d in (execution.differences(config) if execution else [])]
    elsewhere = "; ".join(differences) or "none"
    if requested == "bitwise":
        return ModeChoice(
            "bitwise",
            f"bitwise requested (--mode bitwise); differences from the recorded hardware class and settings: {elsewhere}",
            bound,
        )
    if policy.mode != "bitwise":
        return ModeChoice("tolerance", f"the genesis fixed a tolerance policy ({rule})", bound)
    if differences:
        return ModeChoice(
            "tolerance",
            f"the genesis fixed bitwise on its hardware class, but this re-execution differs ({elsewhere}): "
            f"falling back to its tolerance ({rule})",
            bound,
        )
    hardware = policy.hardware
    where = f"{hardware.device} {hardware.gpu or hardware.machine + '/' + hardware.cpu_capability}, torch {hardware.torch}"
    return ModeChoice(
        "bitwise",
        f"the genesis fixed bitwise, and this machine is in its hardware class ({where}); re-executed with the "
        "recorded settings",
        bound,
    )


def describe(tolerance: Tolerance) -> str:
    return (
        f"{tolerance.metric} within {tolerance.delta}, every parameter tensor and commitment within a relative "
        f"distance of {tolerance.parameter_distance}"
    )


def _differences(recorded: Mapping[str, Any], here: Mapping[str, Any], prefix: str = "") -> list[str]:
    found: list[str] = []
    for key in sorted(set(recorded) | set(here)):
        there, mine = recorded.get(key), here.get(key)
        if isinstance(there, Mapping) and isinstance(mine, Mapping):
            found += _differences(there, mine, f"{prefix}{key}.")
        elif there != mine:
            found.append(f"{prefix}{key} {there!r} there, {mine!r} here")
    return found
