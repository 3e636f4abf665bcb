"""Server-side downsampling of a metric series for charts.

A 100,000-step run must chart fast, so the metrics API sends at most ``max_points`` points
per series. Method ("min-max buckets", the 2-of-4 core of the M4 aggregation of Jugel et
al., VLDB 2014): keep the first and last points; split the points in between into
``(max_points - 2) // 2`` buckets of consecutive steps; from each bucket keep its minimum
and its maximum, in step order. So

- the first and last values are exact (where the run started and where it is now);
- every bucket's extremes survive, hence the global minimum and maximum and every spike
  (a loss blow-up, a rank drop) a chart of that width can show;
- the points kept are real recorded points (no averaging), each still traceable to its
  ledger entry.

Pure and linear in the number of points.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

METHOD = "min-max buckets (first and last kept)"
"""How the API names the method in its answers."""


def downsample(points: Sequence[T], values: Sequence[float], max_points: int) -> list[T]:
    """At most ``max_points`` of ``points`` (in order), chosen by their ``values`` as the
    module docstring describes; all of them when they already fit."""
    if max_points < 2:
        raise ValueError(f"expected max_points >= 2, got {max_points}")
    if len(points) != len(values):
        raise ValueError(
            f"expected one value per point, got {len(points)} points and {len(values)} values"
        )
    n = len(points)
    if n <= max_points:
        return list(points)
    buckets = (max_points - 2) // 2
    kept = [0]
    inner = n - 2  # points strictly between the first and the last
    for b in range(buckets):
        lo = 1 + b * inner // buckets
        hi = 1 + (b + 1) * inner // buckets
        if lo >= hi:
            continue
        low = min(range(lo, hi), key=values.__getitem__)
        high = max(range(lo, hi), key=values.__getitem__)
        kept.extend(sorted({low, high}))
    kept.append(n - 1)
    return [points[i] for i in kept]
