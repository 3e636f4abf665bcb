"""Outlier checks on the clusters' contributions to one round.

A contribution is what one cluster sent, decoded (the checks see exactly what enters the mean;
under compression they work on coordinates, whose inner products equal those of the decoded
pseudo-gradients). Rules, per cluster ``i``:

1. **Non-finite.** A NaN or Inf anywhere: flagged and always excluded.
2. **Norm.** ``‖Δ_i‖`` against a reference norm: the median of the norms accepted in the last
   ``history`` rounds (every cluster) together with this round's norms of the *other* clusters.
   Flagged above ``norm_ratio`` times the reference. With two clusters and no history the
   reference is the other cluster's norm, so a ×100 contribution is pinned on the right cluster
   (only *large* norms are flagged: a small one cannot dominate the mean).
3. **Agreement.** ``a_i = cos(Δ_i, mean of the other clusters' Δ)``. Clusters training one model
   on one task agree: in the simulated runs of docs/outer-algorithm.md ``a_i`` stayed between
   0.24 and 0.9 all run long, compressed or not; a random vector in ``d``
   dimensions has ``|cos| ≈ 1/√d`` (0.001 for 10⁶). Flagged below ``max(min_cosine,
   cosine_ratio · A)`` with ``A`` the median of the agreements accepted in the last ``history``
   rounds (``min_cosine`` alone before there is history).
   With two clusters both agreements are the same number, so the rule says *that* something is
   wrong, not *who*. The tie is broken by each cluster's cosine with the previous applied mean:
   if one is below half the other (and the other is above ``min_cosine``), only the lower is
   flagged; otherwise both are, marked "ambiguous". (The previous mean alone is a weak
   reference -- honest cosines with it swing between 0.02 and 0.35 under the one-step delay,
   and the outer momentum is worse, Nesterov's overshoot sends them below zero -- so it only
   breaks ties.)

When ``exclude`` is set, flagged contributions are left out of the mean; if that leaves nothing
the round's outer step is skipped (the global parameters stay as they were). Only accepted
contributions enter the histories, so a poisoned round does not move the references.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from trainer.outer.errors import OuterStateError
from trainer.outer.protocol import Anomaly

TIE_BREAK = 0.5
"""With two clusters, a cosine with the previous mean below this share of the other cluster's
singles out the culprit."""


@dataclass(frozen=True, kw_only=True)
class ContributionStats:
    """What the checks need to know about one cluster's decoded contribution."""

    norm: float
    """L2 norm (nan when the contribution is not finite)."""
    agreement: float | None
    """Cosine with the mean of the other clusters' contributions (None: no other cluster)."""
    previous: float | None
    """Cosine with the previous round's applied mean (None: no previous mean yet)."""


class AnomalyDetector:
    """Applies the rules above and keeps the histories of accepted norms and agreements."""

    def __init__(
        self, *, norm_ratio: float, min_cosine: float, cosine_ratio: float, history: int, exclude: bool
    ) -> None:
        self.norm_ratio = norm_ratio
        self.min_cosine = min_cosine
        self.cosine_ratio = cosine_ratio
        self.history = history
        self.exclude = exclude
        self._norms: list[list[float]] = []  # accepted norms, one list per past round
        self._agreements: list[list[float]] = []  # accepted agreements, one list per past round

    def check(self, stats: Sequence[ContributionStats]) -> list[Anomaly]:
        """Flag outliers among this round's contributions (cluster order) and record what was
        accepted. Returns one ``Anomaly`` per flagged cluster, in cluster order."""
        reasons: dict[int, list[str]] = {i: [] for i in range(len(stats))}
        finite = [math.isfinite(s.norm) for s in stats]
        self._check_norms(stats, finite, reasons)
        self._check_agreement(stats, finite, reasons)
        anomalies = []
        for i, found in reasons.items():
            if not finite[i]:
                anomalies.append(Anomaly(cluster=i, reason="contribution has non-finite values", excluded=True))
            elif found:
                anomalies.append(Anomaly(cluster=i, reason="; ".join(found), excluded=self.exclude))
        excluded = {a.cluster for a in anomalies if a.excluded}
        kept = [s for i, s in enumerate(stats) if i not in excluded and finite[i]]
        self._norms = [*self._norms, [s.norm for s in kept]][-self.history :]
        agreements = [s.agreement for s in kept if s.agreement is not None and math.isfinite(s.agreement)]
        self._agreements = [*self._agreements, agreements][-self.history :]
        return anomalies

    def _check_norms(
        self, stats: Sequence[ContributionStats], finite: Sequence[bool], reasons: dict[int, list[str]]
    ) -> None:
        past = [n for round_norms in self._norms for n in round_norms]
        for i, s in enumerate(stats):
            if not finite[i]:
                continue
            others = [o.norm for j, o in enumerate(stats) if j != i and finite[j]]
            reference = _median(past + others)
            if reference is not None and reference > 0 and s.norm > self.norm_ratio * reference:
                reasons[i].append(
                    f"norm {s.norm:.4g} is {s.norm / reference:.1f}x the reference {reference:.4g} "
                    f"(limit {self.norm_ratio:g}x)"
                )

    def _check_agreement(
        self, stats: Sequence[ContributionStats], finite: Sequence[bool], reasons: dict[int, list[str]]
    ) -> None:
        typical = _median([a for round_agreements in self._agreements for a in round_agreements])
        threshold = max(self.min_cosine, self.cosine_ratio * typical) if typical is not None else self.min_cosine
        low = [
            i for i, s in enumerate(stats)
            if finite[i] and s.agreement is not None and s.agreement < threshold
        ]
        if len(stats) == 2 and len(low) == 2:
            low, note = self._break_tie(stats)
        else:
            note = ""
        for i in low:
            agreement = stats[i].agreement
            assert agreement is not None
            reasons[i].append(
                f"cosine with the other clusters is {agreement:.3f}, expected >= {threshold:.3g}{note}"
            )

    def _break_tie(self, stats: Sequence[ContributionStats]) -> tuple[list[int], str]:
        """Two clusters that disagree: the one that also disagrees with the previous mean."""
        a, b = stats[0].previous, stats[1].previous
        if a is not None and b is not None:
            high, low = (0, 1) if a >= b else (1, 0)
            p_high, p_low = max(a, b), min(a, b)
            if p_high > self.min_cosine and p_low < TIE_BREAK * p_high:
                return [low], (
                    f" (and {p_low:.3f} with the previous mean, cluster {high} has {p_high:.3f})"
                )
        return [0, 1], " (ambiguous: two clusters, the previous mean does not tell which)"

    def state_dict(self, prefix: str) -> dict[str, torch.Tensor]:
        # Rounds may hold different counts (exclusions), so store flat lists plus the counts.
        state = {}
        for name, rounds in (("norms", self._norms), ("agreements", self._agreements)):
            state[f"{prefix}anomaly.{name}"] = torch.tensor([v for r in rounds for v in r], dtype=torch.float64)
            state[f"{prefix}anomaly.{name}_counts"] = torch.tensor([len(r) for r in rounds], dtype=torch.int64)
        return state

    def load_state_dict(self, state: Mapping[str, torch.Tensor], prefix: str) -> None:
        self._norms = _unflatten(state, f"{prefix}anomaly.norms")
        self._agreements = _unflatten(state, f"{prefix}anomaly.agreements")


def _unflatten(state: Mapping[str, torch.Tensor], key: str) -> list[list[float]]:
    try:
        flat = state[key].tolist()
        counts = state[f"{key}_counts"].tolist()
    except KeyError as exc:
        raise OuterStateError(f"expected key {exc.args[0]!r} in the outer state, it is missing") from exc
    if sum(counts) != len(flat):
        raise OuterStateError(f"expected {sum(counts)} values in {key}, got {len(flat)}")
    rounds, start = [], 0
    for count in counts:
        rounds.append([float(x) for x in flat[start : start + count]])
        start += count
    return rounds


def _median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])
