"""The verification policy: what a run may choose at genesis, and the published bounds every
verifier holds it to (docs/auditing.md, "Verification policy").

A run picks ``bitwise`` (re-executions on its hardware class must match byte for byte) or
``tolerance``; either way it records a fallback tolerance for re-executions elsewhere. A
tolerance is only worth something if it is tight, so the bounds below are fixed by the
verifier, not by the run: a genesis whose tolerance is looser, or whose hardware class names a
device or architecture no one has, fails ``veritrain verify`` (and ``veritrain train``
refuses to start it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from records.genesis import HardwareClass, Tolerance, VerificationPolicy

METRIC_BOUNDS: Mapping[str, float] = {"eval_loss": 1e-2}
"""Metric -> the largest tolerance a policy may set. Held-out loss in nats: re-executions of a
tiny-preset step on other thread counts differ by < 1e-5 (docs/auditing.md); 1e-2 leaves two
orders of magnitude for other hardware while a forged step moves it by more."""

PARAMETER_DISTANCE_BOUND = 5e-3
"""Under tolerance, each re-executed parameter tensor θ' must satisfy
‖θ' − θ_t‖ / ‖θ_t − θ_{t−1}‖ <= this (the re-execution's error against the size of the step's
own update), and so must every commitment (veritrain/audit). Measured by ``veritrain bench
audit`` (docs/auditing.md, "Measuring the bound"): legitimately different executions at the
same precision (other thread counts, a float64 re-execution) stayed below 4.3e-5 on the
default measures and 1.6e-3 on any measure of any configuration tried; the smallest forgery
(a contribution scaled by 1.05) moved a step by 4.4e-2. 5e-3 keeps 3x above the largest
legitimate distance seen and 9x below the smallest forged one."""

CROSS_PRECISION_DISTANCE_BOUND = 1.5e-1
"""The distance a re-execution at another precision than the recorded one (bf16 autocast on
one side, fp32 or fp64 on the other) is held to, a stage at a time: eight significant bits
drift further than any re-ordering of fp32 sums -- ``veritrain bench audit`` measured bf16
against fp32 up to 7.3e-2 -- so this bound (twice that) catches only gross departures (a
stale start, a skipped early inner step), not forgeries of a few percent; those need a
re-execution at the recorded precision (docs/auditing.md)."""

GENERATION_LOGIT_MARGIN = 1e-2
"""Under tolerance, each recorded greedy token, teacher-forced through the recorded checkpoint
on the auditor's machine, must have a logit within this of the position's best
(veritrain/generations.py). Generation is fp32 (trainer/generate.py): one 96-token pass at 1
and 2 threads and in float64 gave logits within 1e-6 of each other (randomly initialised tiny
and small presets, docs/auditing.md), so 1e-2 leaves four orders of magnitude for other
hardware, while a token the model did not choose sits below its best by the logit gap between
them -- a faked continuation is caught at its first faked token."""

DEVICES = ("cpu", "cuda")
MACHINES = ("x86_64", "amd64", "aarch64", "arm64", "ppc64le", "s390x")
_TORCH_VERSION = re.compile(r"\d+\.\d+(\.\d+)?([a-z0-9.+_-]*)")


@dataclass(frozen=True, kw_only=True)
class PolicyChoice:
    """What ``veritrain train --verification`` chooses; the genesis adds the hardware class."""

    mode: str = "bitwise"
    metric: str = "eval_loss"
    delta: float = 1e-3
    parameter_distance: float = PARAMETER_DISTANCE_BOUND

    def __post_init__(self) -> None:
        if self.mode not in ("bitwise", "tolerance"):
            raise ValueError(
                f"PolicyChoice.mode: expected 'bitwise' or 'tolerance', got {self.mode!r}"
            )
        problem = tolerance_problem(self.tolerance())
        if problem:
            raise ValueError(f"PolicyChoice: {problem}")

    def tolerance(self) -> Tolerance:
        return Tolerance(
            metric=self.metric, delta=self.delta, parameter_distance=self.parameter_distance
        )

    def recorded(self, *, hardware: HardwareClass) -> VerificationPolicy:
        """The genesis' policy: this choice on the hardware class the run trains on."""
        return VerificationPolicy(mode=self.mode, hardware=hardware, fallback=self.tolerance())

    @classmethod
    def of(cls, policy: VerificationPolicy) -> PolicyChoice:
        """The choice a recorded policy was made from (a resumed run keeps it)."""
        fallback = policy.fallback
        return cls(
            mode=policy.mode,
            metric=fallback.metric,
            delta=fallback.delta,
            parameter_distance=fallback.parameter_distance,
        )


def tolerance_problem(tolerance: Tolerance) -> str | None:
    bound = METRIC_BOUNDS.get(tolerance.metric)
    if bound is None:
        return f"expected a tolerance on one of {sorted(METRIC_BOUNDS)}, got {tolerance.metric!r}"
    if not 0 <= tolerance.delta <= bound:
        return (
            f"expected a {tolerance.metric} tolerance within [0, "
            f"{bound}] (published bound), got {tolerance.delta}"
        )
    if not 0 < tolerance.parameter_distance <= PARAMETER_DISTANCE_BOUND:
        return (
            "expected a parameter distance within (0, "
            f"{PARAMETER_DISTANCE_BOUND}] (published bound, measured by "
            f"`veritrain bench audit`), got {tolerance.parameter_distance}"
        )
    return None


def policy_problems(policy: VerificationPolicy) -> list[str]:
    """Why ``policy`` is outside the published bounds (empty when it is within them)."""
    problems = []
    tolerance = tolerance_problem(policy.fallback)
    if tolerance:
        problems.append(tolerance)
    hardware = policy.hardware
    if hardware.device not in DEVICES:
        problems.append(
            f"expected a hardware device among {list(DEVICES)}, got {hardware.device!r}"
        )
    if hardware.machine not in MACHINES:
        problems.append(
            f"expected a CPU architecture among {list(MACHINES)}, got {hardware.machine!r}"
        )
    if not hardware.cpu_capability:
        problems.append("expected the CPU capability torch dispatches to (e.g. 'AVX2'), got ''")
    if not _TORCH_VERSION.fullmatch(hardware.torch):
        problems.append(f"expected a torch version like '2.13.0+cpu', got {hardware.torch!r}")
    cuda_fields = {"gpu": hardware.gpu, "cuda": hardware.cuda, "cudnn": hardware.cudnn}
    flags = hardware.deterministic
    if hardware.device == "cuda":
        missing = [name for name, value in cuda_fields.items() if not value and name != "cudnn"]
        if missing:
            problems.append(
                f"expected a CUDA hardware class to name its {' and '.join(missing)}, got none"
            )
    elif (
        any(value is not None for value in cuda_fields.values())
        or flags.cudnn_benchmark is not None
    ):
        problems.append(
            "expected no GPU, CUDA or cuDNN fields on a "
            f"{hardware.device!r} class, got {cuda_fields}"
        )
    if policy.mode == "bitwise" and not flags.algorithms:
        problems.append(
            "expected deterministic algorithms under a "
            "bitwise policy, the genesis says they were off"
        )
    if policy.mode == "bitwise" and flags.cudnn_benchmark:
        problems.append(
            "expected cuDNN autotuning off under a bitwise "
            "policy (it picks kernels by timing), it was on"
        )
    return problems
