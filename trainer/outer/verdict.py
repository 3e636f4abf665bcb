"""One verdict per cluster per round, from every stage's view of its contribution together.

A cluster's contribution to a round is one payload per pipeline stage. Each stage's outer
algorithm measures its own share -- the inner products among the clusters' decoded
contributions (a Gram matrix; under compression the coordinates' inner products equal those of
the decoded pseudo-gradients) and with the previous applied mean, and which payloads repeat an
earlier round's -- and the runtime sums the shares of every stage of the cluster in stage order
(``ContributionStatistics.combine``). Every stage of every cluster then holds the same numbers,
so the pure function :func:`decide` gives the same verdict everywhere, and a verifier who
recomputes the numbers (or reads them from the entry) gets it too. A round's clusters are
those that contributed to it -- its quorum's (trainer/runtime/membership.py), not necessarily
every cluster of the run: "the other clusters", the medians and the majority below count only
them. The rules, per cluster ``i``
(``VERDICT_FLAGS`` in records/outer_step.py; thresholds in ``OuterConfig.anomaly_*``):

1. ``non_finite``: a NaN or Inf anywhere. Always excluded, whatever else holds.
2. ``empty``: the contribution is exactly zero (a free-rider sending nothing).
3. ``large_norm``: ``‖Δ_i‖`` above ``norm_ratio`` times the reference, the median of the norms
   accepted in the last ``history`` rounds and of this round's other finite contributions;
   ``small_norm``: below ``min_norm_ratio`` times the median of this round's other
   contributions that are neither empty nor flagged ``large_norm`` (a cluster that took a
   fraction of the inner steps; only this round's norms make that reference: norms shrink from
   round to round as training settles).
4. ``direction``: ``a_i = cos(Δ_i, mean of the other clusters' Δ)`` below
   ``max(min_cosine, cosine_ratio · A)``. Under ``veritrain.verdict/v2`` ``A`` is the median of
   this round's other clusters' agreements (with three or more clusters; with two, the two
   agreements are one number and only ``min_cosine`` applies): honest pseudo-gradients
   decorrelate together as the loss flattens, so a reference from earlier rounds lags and flags
   them. Under ``veritrain.verdict/v1`` (runs recorded before v2) ``A`` is the median of the
   recently accepted agreements. With two clusters both below the threshold, the tie is broken
   by each cluster's cosine with the previous applied mean (the lower is flagged if below half
   the higher), otherwise both are flagged "ambiguous".
5. ``replayed``: a stage's payload is byte-identical to a payload of one of the last
   ``history`` rounds (same stage, any cluster): a replay, or zeros sent again.
6. ``held_out`` (contribution scores, contribution_score.py): applied alone, Δ_i lowers the
   held-out probe loss by ``g_i``; flagged when ``g_i < held_out_ratio · G`` and ``G − g_i >
   held_out_margin``, ``G`` the median gain of the other clusters that failed none of rules 1-5,
   when ``G > 0`` (the margin keeps the noise of late, small gains from flagging). A poisoned
   contribution raises the loss (``g_i < 0``); a lazy one gains much less.
7. ``own_data`` (when ``own_data_check`` is on; off by default): the gain on the cluster's own
   windows minus the gain on held-out windows, ``v_i``: an honest cluster should improve its
   own (just-trained-on) data more than unseen data; a cluster that trained on other data, or
   replays an old update, does not. Flagged when ``v_i < own_data_ratio · V``, ``V`` the same
   median over the others, when ``V > 0``. On the tiny preset ``v_i`` of honest clusters is
   within the noise of the scored batches, hence off by default (docs/outer-algorithm.md §4).

Exclusion: non-finite contributions always; the others when ``exclude`` is on, at least
``exclude_min_clusters`` clusters contributed to the round and the unflagged ones are a strict
majority of them (with two, or half of them flagged, nobody can tell who is right: the flags
are recorded, nothing is excluded). Only unflagged contributions enter the histories, so a
poisoned round does not move the references.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from records.outer_step import VERDICT_FLAGS, ClusterVerdict, ContributionScore
from trainer.outer.config import OuterConfig, VerdictRuleName
from trainer.outer.errors import OuterStateError

V1: VerdictRuleName = "veritrain.verdict/v1"
V2: VerdictRuleName = "veritrain.verdict/v2"
"""The versions of the rules above (``OuterConfig.anomaly_rule``, recorded in the genesis); a
change of any rule gets a new name, and every version stays decidable for the runs it judged."""
RULE_NAME: VerdictRuleName = V2
"""The rule a new run's configuration chooses by default (``OuterConfig.anomaly_rule``)."""
SCORE_SEED_NAME = "veritrain.verdict/v1"
"""What the scored windows' seed is derived from; every version keeps v1's (:func:`score_seed`)."""
TIE_BREAK = 0.5
"""With two clusters, a cosine with the previous mean below this share of the other cluster's
singles out the culprit."""
DIGEST_BYTES = 32


@dataclass(frozen=True, kw_only=True)
class VerdictRule:
    """The thresholds of the rules (from ``OuterConfig``, recorded in the genesis)."""

    name: VerdictRuleName
    """The version of the rules (module docstring)."""
    norm_ratio: float
    min_norm_ratio: float
    min_cosine: float
    cosine_ratio: float
    history: int
    exclude: bool
    exclude_min_clusters: int
    held_out_ratio: float
    held_out_margin: float
    own_data_check: bool
    own_data_ratio: float

    @classmethod
    def from_config(cls, config: OuterConfig) -> VerdictRule:
        return cls(
            name=config.anomaly_rule,
            norm_ratio=config.anomaly_norm_ratio,
            min_norm_ratio=config.anomaly_min_norm_ratio,
            min_cosine=config.anomaly_min_cosine,
            cosine_ratio=config.anomaly_cosine_ratio,
            history=config.anomaly_history,
            exclude=config.anomaly_exclude,
            exclude_min_clusters=config.anomaly_exclude_min_clusters,
            held_out_ratio=config.anomaly_held_out_ratio,
            held_out_margin=config.anomaly_held_out_margin,
            own_data_check=config.anomaly_own_data_check,
            own_data_ratio=config.anomaly_own_data_ratio,
        )


@dataclass(frozen=True, kw_only=True)
class ContributionStatistics:
    """What the rules need to know about one round's contributions, over some parameters (one
    stage's, or every stage's once combined). Plain floats, so stages can exchange them."""

    gram: tuple[tuple[float, ...], ...]
    """``gram[i][j] = <Δ_i, Δ_j>`` (float64 sums; NaN where a contribution is not finite)."""
    previous: tuple[float, ...] | None
    """``<Δ_i, m>`` with the previous applied mean ``m``; None before any mean was applied."""
    previous_square: float | None
    """``<m, m>``; None with ``previous``."""
    repeated: tuple[int, ...]
    """Per cluster: stages whose payload repeats one of an earlier round."""
    digests: tuple[tuple[str, ...], ...]
    """Per cluster: its payload digests, one per stage in stage order."""

    @property
    def clusters(self) -> int:
        return len(self.gram)

    @classmethod
    def measure(
        cls,
        contributions: Sequence[Sequence[torch.Tensor]],
        *,
        previous: Sequence[torch.Tensor] | None,
        digests: Sequence[str],
        earlier: frozenset[str] = frozenset(),
    ) -> ContributionStatistics:
        """One stage's share: ``contributions`` in cluster order (coordinates or tensors),
        ``previous`` in the same space, the stage's payload digests and those of earlier rounds."""
        n = len(contributions)
        gram = [[math.nan] * n for _ in range(n)]
        for i in range(n):
            for j in range(i, n):
                gram[i][j] = gram[j][i] = _dot(contributions[i], contributions[j])
        prev = tuple(_dot(c, previous) for c in contributions) if previous is not None else None
        return cls(
            gram=tuple(tuple(row) for row in gram),
            previous=prev,
            previous_square=_dot(previous, previous) if previous is not None else None,
            repeated=tuple(int(d in earlier) for d in digests),
            digests=tuple((d,) for d in digests),
        )

    @staticmethod
    def combine(stages: Sequence[ContributionStatistics]) -> ContributionStatistics:
        """The statistics of the whole model from every stage's, summed in stage order (the
        order is the contract: every process sums the same floats the same way)."""
        first = stages[0]
        n = first.clusters
        if any(s.clusters != n for s in stages):
            counts = [s.clusters for s in stages]
            raise OuterStateError(
                f"expected statistics of {n} clusters from every stage, got {counts}"
            )
        gram = [[0.0] * n for _ in range(n)]
        for s in stages:
            for i in range(n):
                for j in range(n):
                    gram[i][j] += s.gram[i][j]
        previous: tuple[float, ...] | None = None
        previous_square: float | None = None
        if all(s.previous is not None for s in stages):
            totals = [0.0] * n
            square = 0.0
            for s in stages:
                assert s.previous is not None and s.previous_square is not None
                totals = [t + v for t, v in zip(totals, s.previous, strict=True)]
                square += s.previous_square
            previous, previous_square = tuple(totals), square
        return ContributionStatistics(
            gram=tuple(tuple(row) for row in gram),
            previous=previous,
            previous_square=previous_square,
            repeated=tuple(sum(s.repeated[i] for s in stages) for i in range(n)),
            digests=tuple(tuple(d for s in stages for d in s.digests[i]) for i in range(n)),
        )

    def to_floats(self) -> list[float]:
        """Flat floats for a collective (digests as their byte values: exact in float64)."""
        n = self.clusters
        if any(len(d) != 1 for d in self.digests):
            raise OuterStateError(
                "expected one stage's statistics (one digest per cluster) to send"
            )
        values = [float(n)] + [v for row in self.gram for v in row]
        if self.previous is None or self.previous_square is None:
            values += [0.0] + [0.0] * (n + 1)
        else:
            values += [1.0, *self.previous, self.previous_square]
        values += [float(r) for r in self.repeated]
        for (digest,) in self.digests:
            values += [float(b) for b in bytes.fromhex(digest)]
        return values

    @classmethod
    def from_floats(cls, values: Sequence[float]) -> ContributionStatistics:
        n = int(values[0])
        at = 1
        gram = tuple(tuple(values[at + i * n : at + (i + 1) * n]) for i in range(n))
        at += n * n
        has_previous = values[at] == 1.0
        previous = tuple(values[at + 1 : at + 1 + n]) if has_previous else None
        previous_square = values[at + 1 + n] if has_previous else None
        at += n + 2
        repeated = tuple(int(v) for v in values[at : at + n])
        at += n
        digests = tuple(
            (
                bytes(
                    int(v) for v in values[at + i * DIGEST_BYTES : at + (i + 1) * DIGEST_BYTES]
                ).hex(),
            )
            for i in range(n)
        )
        return cls(
            gram=gram,
            previous=previous,
            previous_square=previous_square,
            repeated=repeated,
            digests=digests,
        )

    def measures(self) -> list[Measures]:
        """Per cluster: norm, agreement, cosine with the previous mean, repeated payload."""
        n = self.clusters
        finite = [math.isfinite(self.gram[i][i]) for i in range(n)]
        out = []
        for i in range(n):
            if not finite[i]:
                out.append(
                    Measures(
                        norm=None, agreement=None, previous=None, repeated=self.repeated[i] > 0
                    )
                )
                continue
            norm = math.sqrt(max(self.gram[i][i], 0.0))
            others = [j for j in range(n) if j != i and finite[j]]
            agreement = None
            if others:
                # <Δ_i, mean_O> = Σ_j G_ij / |O|;  ‖mean_O‖² = Σ_jk G_jk / |O|²  (the |O| cancel)
                cross = math.fsum(self.gram[i][j] for j in others)
                square = math.fsum(self.gram[j][k] for j in others for k in others)
                agreement = _cosine(cross, norm, square)
            previous = None
            if self.previous is not None and self.previous_square is not None:
                previous = _cosine(self.previous[i], norm, self.previous_square)
            out.append(
                Measures(
                    norm=norm, agreement=agreement, previous=previous, repeated=self.repeated[i] > 0
                )
            )
        return out


@dataclass(frozen=True, kw_only=True)
class Measures:
    """What :func:`decide` reads about one cluster (recorded in its ``ClusterVerdict``, except
    ``repeated``, which a verifier recomputes from the recorded payload digests)."""

    norm: float | None
    agreement: float | None
    previous: float | None
    repeated: bool


class VerdictHistory:
    """The norms and agreements of the unflagged contributions of the last rounds (identical in
    every stage of every cluster: they come from the combined statistics)."""

    def __init__(self, history: int) -> None:
        self.history = history
        self.norms: list[list[float]] = []
        self.agreements: list[list[float]] = []

    def accept(self, verdicts: Sequence[ClusterVerdict]) -> None:
        clean = [v for v in verdicts if not v.flags]
        self.norms = [*self.norms, [v.norm for v in clean if v.norm is not None]][-self.history :]
        self.agreements = [
            *self.agreements,
            [v.agreement for v in clean if v.agreement is not None],
        ][-self.history :]

    def state_dict(self, prefix: str) -> dict[str, torch.Tensor]:
        # Rounds hold different counts (flags), so store flat lists plus the counts.
        state = {}
        for name, rounds in (("norms", self.norms), ("agreements", self.agreements)):
            state[f"{prefix}verdict.{name}"] = torch.tensor(
                [v for r in rounds for v in r], dtype=torch.float64
            )
            state[f"{prefix}verdict.{name}_counts"] = torch.tensor(
                [len(r) for r in rounds], dtype=torch.int64
            )
        return state

    def load_state_dict(self, state: Mapping[str, torch.Tensor], prefix: str) -> None:
        self.norms = unflatten(state, f"{prefix}verdict.norms")
        self.agreements = unflatten(state, f"{prefix}verdict.agreements")


def decide(
    rule: VerdictRule,
    measures: Sequence[Measures],
    scores: Sequence[ContributionScore | None] | None,
    history: VerdictHistory,
    *,
    clusters: Sequence[int] | None = None,
) -> list[ClusterVerdict]:
    """The verdict on every cluster that contributed to one round; see the module docstring.
    ``measures[i]`` and ``scores[i]`` are cluster ``clusters[i]``'s (the round's clusters,
    ascending; None: 0..n-1), and every rule and majority counts those clusters only. Pure: the
    caller feeds the result to ``history.accept``."""
    n = len(measures)
    members = list(range(n)) if clusters is None else list(clusters)
    if len(members) != n or members != sorted(set(members)):
        raise OuterStateError(f"expected {n} distinct clusters in ascending order, got {members}")
    failures: list[dict[str, str]] = [{} for _ in range(n)]
    finite = [m.norm is not None for m in measures]
    for i, m in enumerate(measures):
        if not finite[i]:
            failures[i]["non_finite"] = "contribution has non-finite values"
        elif m.norm == 0.0:
            failures[i]["empty"] = "contribution is all zeros"
        if m.repeated:
            failures[i]["replayed"] = "a payload repeats one sent in an earlier round"
    _check_norms(rule, measures, history, failures)
    _check_direction(rule, measures, history, failures, members)
    if scores is not None:
        _check_scores(rule, scores, failures)
    flagged = sum(1 for f in failures if f)
    majority = (n - flagged) * 2 > n
    verdicts = []
    for i, m in enumerate(measures):
        flags = tuple(flag for flag in VERDICT_FLAGS if flag in failures[i])
        excluded = "non_finite" in failures[i] or (
            bool(flags) and rule.exclude and n >= rule.exclude_min_clusters and majority
        )
        score = scores[i] if scores is not None and finite[i] else None
        verdicts.append(
            ClusterVerdict(
                cluster=members[i],
                norm=m.norm,
                agreement=m.agreement,
                previous=m.previous,
                score=score,
                flags=flags,
                reason="; ".join(failures[i][flag] for flag in flags),
                excluded=excluded,
            )
        )
    return verdicts


def _check_norms(
    rule: VerdictRule,
    measures: Sequence[Measures],
    history: VerdictHistory,
    failures: list[dict[str, str]],
) -> None:
    past = [v for r in history.norms for v in r]
    for i, m in enumerate(measures):
        if m.norm is None:
            continue
        others = [o.norm for j, o in enumerate(measures) if j != i and o.norm is not None]
        reference = _median(past + others)
        if reference is not None and reference > 0 and m.norm > rule.norm_ratio * reference:
            failures[i]["large_norm"] = (
                f"norm {m.norm:.4g} is {m.norm / reference:.1f}x the reference {reference:.4g} "
                f"(limit {rule.norm_ratio:g}x)"
            )
    # Small norms against this round's others that are neither empty nor blown up (a x100
    # cluster would make every honest one look small).
    plausible = [
        i
        for i, m in enumerate(measures)
        if m.norm and not {"empty", "large_norm"} & set(failures[i])
    ]
    for i, m in enumerate(measures):
        now = _median([measures[j].norm or 0.0 for j in plausible if j != i])
        if m.norm and now is not None and m.norm < rule.min_norm_ratio * now:
            failures[i]["small_norm"] = (
                f"norm {m.norm:.4g} is {m.norm / now:.2f}x the other clusters' median {now:.4g} "
                f"(at least {rule.min_norm_ratio:g}x expected)"
            )


def _check_direction(
    rule: VerdictRule,
    measures: Sequence[Measures],
    history: VerdictHistory,
    failures: list[dict[str, str]],
    clusters: Sequence[int],
) -> None:
    thresholds = [_direction_threshold(rule, measures, history, i) for i in range(len(measures))]
    low = [
        i for i, m in enumerate(measures) if m.agreement is not None and m.agreement < thresholds[i]
    ]
    note = ""
    if len(measures) == 2 and len(low) == 2:
        low, note = _break_tie(rule, measures, clusters)
    for i in low:
        agreement = measures[i].agreement
        assert agreement is not None
        failures[i]["direction"] = (
            f"cosine with the other clusters is {agreement:.3f}, "
            f"expected >= {thresholds[i]:.3g}{note}"
        )


def _direction_threshold(
    rule: VerdictRule, measures: Sequence[Measures], history: VerdictHistory, i: int
) -> float:
    """Rule 4's threshold for cluster ``i`` under the rule's version (module docstring)."""
    if rule.name == V1:
        typical = _median([v for r in history.agreements for v in r])
    else:
        others = [m.agreement for j, m in enumerate(measures) if j != i and m.agreement is not None]
        typical = _median(others) if len(measures) >= 3 else None
    if typical is None:
        return rule.min_cosine
    return max(rule.min_cosine, rule.cosine_ratio * typical)


def _break_tie(
    rule: VerdictRule, measures: Sequence[Measures], clusters: Sequence[int]
) -> tuple[list[int], str]:
    """Two clusters that disagree: the one that also disagrees with the previous mean."""
    a, b = measures[0].previous, measures[1].previous
    if a is not None and b is not None:
        high, low = (0, 1) if a >= b else (1, 0)
        p_high, p_low = max(a, b), min(a, b)
        if p_high > rule.min_cosine and p_low < TIE_BREAK * p_high:
            return (
                [low],
                f" (and {p_low:.3f} with the previous mean, "
                f"cluster {clusters[high]} has {p_high:.3f})",
            )
    return [0, 1], " (ambiguous: two clusters, the previous mean does not tell which)"


def _check_scores(
    rule: VerdictRule, scores: Sequence[ContributionScore | None], failures: list[dict[str, str]]
) -> None:
    """Rules 6 and 7, each against the median of the clusters that failed none of rules 1-5."""
    trusted = [i for i, f in enumerate(failures) if not f and scores[i] is not None]
    gains = {i: -s.held_out for i, s in enumerate(scores) if s is not None}
    own = {i: s.held_out - s.own_data for i, s in enumerate(scores) if s is not None}
    for i in range(len(scores)):
        if i not in gains or "non_finite" in failures[i]:
            continue
        reference = _median([gains[j] for j in trusted if j != i])
        if (
            reference is not None
            and reference > 0
            and gains[i] < rule.held_out_ratio * reference
            and reference - gains[i] > rule.held_out_margin
        ):
            failures[i]["held_out"] = (
                f"applied alone it lowers the held-out loss by {gains[i]:.4g}, the other clusters' "
                f"median is {reference:.4g} (expected at least {rule.held_out_ratio:g}x, or within "
                f"{rule.held_out_margin:g})"
            )
        if not rule.own_data_check:
            continue
        reference = _median([own[j] for j in trusted if j != i])
        if reference is not None and reference > 0 and own[i] < rule.own_data_ratio * reference:
            failures[i]["own_data"] = (
                f"it gains {own[i]:.4g} more on its own data than on held-out data, the other "
                f"clusters' median is {reference:.4g} (expected at least {rule.own_data_ratio:g}x)"
            )


def score_seed(round: int, digests: Sequence[Sequence[str]]) -> bytes:
    """Seed of the windows a round is scored on: fixed by every cluster's payloads of the round
    (cluster order, stages in order), which no cluster knows before it has sent its own -- so a
    lazy cluster cannot train on just the windows it will be scored on."""
    h = hashlib.sha256(f"{SCORE_SEED_NAME}/score/{round}".encode())
    for per_stage in digests:
        for digest in per_stage:
            h.update(bytes.fromhex(digest))
    return h.digest()


def unflatten(state: Mapping[str, torch.Tensor], key: str) -> list[list[float]]:
    try:
        flat = state[key].tolist()
        counts = state[f"{key}_counts"].tolist()
    except KeyError as exc:
        raise OuterStateError(
            f"expected key {exc.args[0]!r} in the outer state, it is missing"
        ) from exc
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


def _dot(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    return math.fsum(
        float(torch.dot(x.reshape(-1).double(), y.reshape(-1).double()))
        for x, y in zip(a, b, strict=True)
    )


def _cosine(cross: float, norm: float, other_square: float) -> float | None:
    other = math.sqrt(max(other_square, 0.0))
    if not (math.isfinite(cross) and math.isfinite(other)) or norm == 0.0 or other == 0.0:
        return None
    return cross / (norm * other)
