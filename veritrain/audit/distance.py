"""The tolerance rule's measure: a re-execution's relative distance from the record.

For a parameter tensor recorded as θ_t after a step that started from θ_{t−1}, a
re-execution θ′ is at relative distance

    d = ‖θ′ − θ_t‖ / ‖θ_t − θ_{t−1}‖

-- its error against the size of the step's own update, so a bound on d means the same thing
for a tensor that moved a lot and one that barely moved, at the start of training and late in
it. When the update is zero (a frozen tensor), d is 0 if θ′ equals θ_t and infinite otherwise.

The same measure applies to fingerprints (trainer/runtime/commitments.py): the projection is
linear, so with f(·) the fingerprint, ‖f(θ′) − f(θ_t)‖ / ‖f(θ_t) − f(θ_{t−1})‖ estimates
d from a few dozen numbers (each norm within about sqrt(2/k) of the true one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from records.commitments import Fingerprint


@dataclass(frozen=True)
class Distance:
    """One compared quantity and its relative distance."""

    name: str
    value: float


def relative_distance(
    recorded: torch.Tensor, again: torch.Tensor, start: torch.Tensor | None
) -> float:
    """d of the module docstring, accumulated in float64 (``start`` None: against ‖θ_t‖)."""
    theta = recorded.detach().to("cpu", torch.float64)
    error = float(torch.linalg.vector_norm(again.detach().to("cpu", torch.float64) - theta))
    update = theta - start.detach().to("cpu", torch.float64) if start is not None else theta
    return _ratio(error, float(torch.linalg.vector_norm(update)))


def fingerprint_distance(recorded: Fingerprint, again: Fingerprint, start: Fingerprint) -> float:
    """d estimated from fingerprints (a value that was not finite makes it infinite)."""
    arrays = [_array(f) for f in (recorded, again, start)]
    if any(a is None for a in arrays) or len({len(f) for f in (recorded, again, start)}) != 1:
        return math.inf
    theta, other, begin = arrays
    assert theta is not None and other is not None and begin is not None
    return _ratio(float(np.linalg.norm(other - theta)), float(np.linalg.norm(theta - begin)))


def tensor_distances(
    recorded: Mapping[str, torch.Tensor],
    again: Mapping[str, torch.Tensor],
    start: Mapping[str, torch.Tensor] | None,
) -> tuple[list[Distance], list[str]]:
    """d for every recorded tensor (sorted by name), and the tensors that could not be compared
    (missing or reshaped in the re-execution)."""
    distances: list[Distance] = []
    problems: list[str] = []
    for name, theta in sorted(recorded.items()):
        other = again.get(name)
        if other is None or other.shape != theta.shape:
            problems.append(f"{name}: missing or reshaped in the re-execution")
            continue
        previous = start.get(name) if start is not None else None
        distances.append(Distance(name, relative_distance(theta, other, previous)))
    return distances, problems


def global_distance(
    recorded: Mapping[str, torch.Tensor],
    again: Mapping[str, torch.Tensor],
    start: Mapping[str, torch.Tensor] | None,
) -> float:
    """d over every tensor of ``recorded`` at once (as one concatenated vector)."""
    error = update = 0.0
    for name, theta in recorded.items():
        other = again.get(name)
        if other is None or other.shape != theta.shape:
            return math.inf
        t = theta.detach().to("cpu", torch.float64)
        error += float((other.detach().to("cpu", torch.float64) - t).pow(2).sum())
        previous = start.get(name) if start is not None else None
        u = t - previous.detach().to("cpu", torch.float64) if previous is not None else t
        update += float(u.pow(2).sum())
    return _ratio(math.sqrt(error), math.sqrt(update))


def stage_fingerprint(tensors: Mapping[str, Fingerprint]) -> Fingerprint:
    """A stage's fingerprint from its tensors' (their sum, in order; see the commitments)."""
    total = (
        np.zeros(len(next(iter(tensors.values()))), dtype=np.float64) if tensors else np.zeros(0)
    )
    for values in tensors.values():
        array = _array(values)
        if array is None:
            return tuple(None for _ in total)
        total += array
    return tuple(float(v) for v in total)


def largest(distances: Sequence[Distance]) -> Distance | None:
    return max(distances, key=lambda d: d.value, default=None)


def _array(values: Fingerprint) -> np.ndarray | None:
    if any(v is None or not math.isfinite(v) for v in values):
        return None
    return np.array(values, dtype=np.float64)


def _ratio(error: float, scale: float) -> float:
    if not math.isfinite(error) or not math.isfinite(scale):
        return math.inf
    if scale == 0.0:
        return 0.0 if error == 0.0 else math.inf
    return error / scale
