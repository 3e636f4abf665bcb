"""From every process's numbers to one OuterStepRecord (on the coordinator).

Each process sends a small ``RankReport`` (a ``gather_object`` of floats and digests, never
tensors); the coordinator combines them:

* train loss: mean over clusters (cluster order) of each cluster's mean loss over the step's H
  inner steps (measured on its last stage); eval loss: cluster 0's held-out loss;
* seconds: the slowest process (the step waits for it); bytes: what one cluster sent, summed
  over its stages (for AllReduce, its gradient bytes over the H all-reduces);
* contribution digests: every (cluster, stage)'s own payload digest for this round;
* applied rounds: each stage's ``OuterUpdate`` for the same round merged into one entry, with
  norms combined over stages as sqrt(sum of squares) and the round's verdicts, one per cluster,
  which every stage must have reached alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from trainer.data.assignment import AssignmentRule
from trainer.errors import TrainerError
from trainer.outer.protocol import OuterUpdate
from trainer.recorder import (
    AnomalyFlag,
    AppliedRound,
    ContributionDigest,
    OuterStepRecord,
)


@dataclass(frozen=True, kw_only=True)
class RankReport:
    """One process's share of an outer step."""

    cluster: int
    stage: int
    files: Mapping[str, str]
    contribution_digest: str | None
    contribution_stats: Mapping[str, float]
    updates: Sequence[OuterUpdate]
    train_loss: float | None
    eval_loss: float | None
    grad_norm: float
    lr: float
    compute_seconds: float
    comm_seconds: float
    exposed_comm_seconds: float
    bytes_sent: int
    extra: Mapping[str, float] = field(default_factory=dict)


def build_record(
    *,
    step: int,
    inner_steps: int,
    method: str,
    first_inner_step: int,
    tokens_before: int,
    rule: AssignmentRule,
    reports: Sequence[RankReport],
    wall_seconds: float,
) -> OuterStepRecord:
    clusters = sorted({r.cluster for r in reports})
    losses = [r.train_loss for r in sorted(reports, key=lambda r: r.cluster) if r.train_loss is not None]
    evals = [r.eval_loss for r in reports if r.eval_loss is not None]
    step_tokens = len(clusters) * inner_steps * rule.sequences_per_step * rule.context
    metrics: dict[str, float] = {
        "train_loss": sum(losses) / len(losses) if losses else math.nan,
        "lr": reports[0].lr,
        "grad_norm": max(r.grad_norm for r in reports),
        "tokens": float(tokens_before + step_tokens),
        "step_tokens": float(step_tokens),
        "compute_seconds": max(r.compute_seconds for r in reports),
        "comm_seconds": max(r.comm_seconds for r in reports),
        "exposed_comm_seconds": max(r.exposed_comm_seconds for r in reports),
        "wall_seconds": wall_seconds,
        "bytes_sent": float(max(sum(r.bytes_sent for r in reports if r.cluster == c) for c in clusters)),
        "bytes_sent_all_clusters": float(sum(r.bytes_sent for r in reports)),
    }
    if evals:
        metrics["eval_loss"] = evals[0]
        metrics["perplexity"] = math.exp(min(evals[0], 80.0))
    pseudo_norms = _per_cluster_norm(reports, "pseudo_gradient_norm")
    if pseudo_norms:
        metrics["pseudo_gradient_norm"] = sum(pseudo_norms.values()) / len(pseudo_norms)
    applied = _applied_rounds(reports)
    if applied:
        latest = applied[-1]
        metrics["rank"] = float(latest.rank)
        metrics["bits"] = float(latest.bits)
        metrics.update({k: v for k, v in latest.stats.items() if not k.startswith("stage")})
    contributions = [
        ContributionDigest(cluster=r.cluster, stage=r.stage, digest=r.contribution_digest)
        for r in sorted(reports, key=lambda r: (r.cluster, r.stage))
        if r.contribution_digest is not None
    ]
    files: dict[str, str] = {}
    for r in reports:
        files.update(r.files)
    return OuterStepRecord(
        step=step,
        inner_steps=inner_steps,
        method=method,
        metrics=metrics,
        data_ranges=[
            rule.data_range(c, first_inner_step, inner_steps)
            for c in clusters
        ],
        contribution_digests=contributions,
        applied=applied,
        anomalies=[a for round_ in applied for a in round_.anomalies],
        files=dict(sorted(files.items())),
    )


def _per_cluster_norm(reports: Sequence[RankReport], key: str) -> dict[int, float]:
    squares: dict[int, float] = {}
    for r in reports:
        if key in r.contribution_stats:
            squares[r.cluster] = squares.get(r.cluster, 0.0) + r.contribution_stats[key] ** 2
    return {c: math.sqrt(v) for c, v in squares.items()}


def _applied_rounds(reports: Sequence[RankReport]) -> list[AppliedRound]:
    """Merge the per-stage updates of each round. Every cluster applies the same gathered
    payloads, so cluster 0's processes speak for the round (one per stage)."""
    speakers = [r for r in reports if r.cluster == min(x.cluster for x in reports)]
    by_round: dict[int, list[tuple[int, OuterUpdate]]] = {}
    for r in speakers:
        for update in r.updates:
            by_round.setdefault(update.round, []).append((r.stage, update))
    applied = []
    for round_, stage_updates in sorted(by_round.items()):
        stage_updates.sort(key=lambda item: item[0])
        stats: dict[str, float] = {}
        squares: dict[str, float] = {}
        for stage, update in stage_updates:
            for key, value in update.stats.items():
                stats[f"stage{stage}.{key}"] = value
                if key.endswith("norm"):
                    squares[key] = squares.get(key, 0.0) + value * value
        stats.update({key: math.sqrt(value) for key, value in squares.items()})
        verdicts = list(stage_updates[0][1].verdicts)
        for stage, update in stage_updates[1:]:
            if list(update.verdicts) != verdicts:
                raise TrainerError(
                    f"expected every stage to reach the verdicts of stage {stage_updates[0][0]} on "
                    f"round {round_}, stage {stage} reached others"
                )
        applied.append(
            AppliedRound(
                round=round_,
                contribution_digests=sorted(
                    (
                        ContributionDigest(cluster=cluster, stage=stage, digest=digest)
                        for stage, update in stage_updates
                        for cluster, digest in enumerate(update.contribution_digests)
                    ),
                    key=lambda c: (c.cluster, c.stage),
                ),
                anomalies=[
                    AnomalyFlag(round=round_, cluster=v.cluster, reason=v.reason, excluded=v.excluded)
                    for v in verdicts
                    if v.flags
                ],
                verdicts=verdicts,
                payload_bytes=sum(update.payload_bytes for _, update in stage_updates),
                rank=max(update.rank for _, update in stage_updates),
                bits=max(update.bits for _, update in stage_updates),
                stats=stats,
            )
        )
    return applied
