"""Small statistics for timings: percentiles and rates."""

from __future__ import annotations

import math
from collections.abc import Sequence

from veritrain.errors import BenchError


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks (NumPy's
    default method), so p50 of an even count is the midpoint of the two middle values."""
    if not values:
        raise BenchError("expected at least one value for a percentile, got none")
    if not 0 <= q <= 100:
        raise BenchError(f"expected a percentile in [0, 100], got {q}")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def rate(count: float, seconds: float) -> float:
    """``count`` per second; infinite for a zero duration (too fast for the clock)."""
    return count / seconds if seconds > 0 else math.inf


def verdict(met: bool) -> str:
    """How a report line says whether a target was met."""
    return "met" if met else "MISSED"
