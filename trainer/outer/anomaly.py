"""Outlier checks on the clusters' contributions to one round.

A contribution is what one cluster sent, decoded (so the checks see exactly what enters the
average). Three rules, applied per cluster ``i``:

1. **Non-finite.** A NaN or Inf anywhere: flagged and always excluded.
2. **Norm.** ``‖Δ_i‖`` against a reference norm: the median of the norms accepted in the last
   ``history`` rounds (every cluster) together with this round's norms of the *other* clusters.
   Flagged when the ratio exceeds ``norm_ratio``. With two clusters and no history the
   reference is simply the other cluster's norm, so a ×100 contribution is flagged and the
   honest one is not (only *large* norms are flagged: a small one cannot dominate the mean).
3. **Direction.** ``cos(Δ_i, r)`` against a reference direction ``r``: the previous round's
   applied mean pseudo-gradient once there is one, otherwise the mean of the other clusters'
   contributions. Flagged when below ``min_cosine``. Successive pseudo-gradients of one model on
   one task overlap: in the simulated runs of docs/outer-algorithm.md an honest cluster's cosine
   with the previous mean stayed between 0.13 and 0.35 all run long, while a random vector in
   ``d`` dimensions has ``|cos| ≈ 1/√d`` (0.001 for 10⁶). The outer momentum is *not* a good
   reference: Nesterov's overshoot makes honest cosines with it dip below zero mid-run. With two
   clusters in round 0 the two cosines are the same number, so both are flagged as
   "ambiguous" -- nothing says which of the two is wrong.

When ``exclude`` is set, flagged contributions are left out of the average; if that leaves
nothing the round's outer step is skipped (the global parameters stay as they were).
Only accepted norms enter the history, so a poisoned round does not move the reference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from trainer.outer.errors import OuterStateError
from trainer.outer.protocol import Anomaly


@dataclass(frozen=True, kw_only=True)
class ContributionStats:
    """What the checks need to know about one cluster's decoded contribution."""

    norm: float
    """L2 norm (nan when the contribution is not finite)."""
    cosine: float | None
    """Cosine with the reference direction; None when there is no reference yet."""
    reference: str
    """Which reference ``cosine`` was measured against ("previous" or "others")."""


class AnomalyDetector:
    """Applies the rules above and keeps the history of accepted norms."""

    def __init__(self, *, norm_ratio: float, min_cosine: float, history: int, exclude: bool) -> None:
        self.norm_ratio = norm_ratio
        self.min_cosine = min_cosine
        self.history = history
        self.exclude = exclude
        self._norms: list[list[float]] = []  # accepted norms, one list per past round

    def check(self, stats: Sequence[ContributionStats]) -> list[Anomaly]:
        """Flag outliers among this round's contributions (cluster order) and record the
        accepted norms. Returns one ``Anomaly`` per flagged cluster, in cluster order."""
        anomalies: list[Anomaly] = []
        past = [n for round_norms in self._norms for n in round_norms]
        ambiguous = len(stats) == 2 and all(s.reference == "others" for s in stats)
        for i, s in enumerate(stats):
            reasons: list[str] = []
            if not math.isfinite(s.norm):
                anomalies.append(Anomaly(cluster=i, reason="contribution has non-finite values",
                                         excluded=True))
                continue
            others = [o.norm for j, o in enumerate(stats) if j != i and math.isfinite(o.norm)]
            reference = _median(past + others)
            if reference is not None and reference > 0 and s.norm > self.norm_ratio * reference:
                reasons.append(
                    f"norm {s.norm:.4g} is {s.norm / reference:.1f}x the reference {reference:.4g} "
                    f"(limit {self.norm_ratio:g}x)"
                )
            if s.cosine is not None and s.cosine < self.min_cosine:
                what = "the previous mean" if s.reference == "previous" else "the other clusters"
                note = " (ambiguous: two clusters, no history yet)" if ambiguous else ""
                reasons.append(
                    f"cosine with {what} is {s.cosine:.3f}, expected >= {self.min_cosine:g}{note}"
                )
            if reasons:
                anomalies.append(Anomaly(cluster=i, reason="; ".join(reasons), excluded=self.exclude))
        excluded = {a.cluster for a in anomalies if a.excluded}
        accepted = [s.norm for i, s in enumerate(stats) if i not in excluded and math.isfinite(s.norm)]
        self._norms = [*self._norms, accepted][-self.history :]
        return anomalies

    def state_dict(self, prefix: str) -> dict[str, torch.Tensor]:
        # Rounds may hold different counts (exclusions), so store a flat list plus the counts.
        flat = [n for round_norms in self._norms for n in round_norms]
        return {
            f"{prefix}anomaly.norms": torch.tensor(flat, dtype=torch.float64),
            f"{prefix}anomaly.counts": torch.tensor([len(r) for r in self._norms], dtype=torch.int64),
        }

    def load_state_dict(self, state: Mapping[str, torch.Tensor], prefix: str) -> None:
        try:
            flat = state[f"{prefix}anomaly.norms"].tolist()
            counts = state[f"{prefix}anomaly.counts"].tolist()
        except KeyError as exc:
            raise OuterStateError(f"expected key {exc.args[0]!r} in the outer state, it is missing") from exc
        if sum(counts) != len(flat):
            raise OuterStateError(f"expected {sum(counts)} anomaly norms, got {len(flat)}")
        rounds, start = [], 0
        for count in counts:
            rounds.append([float(x) for x in flat[start : start + count]])
            start += count
        self._norms = rounds


def _median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])
