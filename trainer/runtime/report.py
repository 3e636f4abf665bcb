"""From the round's headers and the processes' reports to one OuterStepReport (on the
coordinator).

Two sources, on purpose:

* the **headers** every contributing process posted before the quorum formed (exchange.py):
  its payload digest and signature, the contribution's norms, and its cluster's numbers. They
  exist for every contributor, also one that died after the exchange, so everything a
  re-execution must reproduce comes from them: train loss (mean over the step's clusters, in
  cluster order), gradient norm, learning rate, tokens, bytes on the wire, pseudo-gradient norm;
* the **reports** each process sends after saving its files (``RankReport``): the files'
  digests, the seconds it measured, the exchanges it applied (cluster 0's processes speak for
  every applied round: every cluster applies the same payloads), cluster 0's held-out loss. A
  process that died before reporting leaves its files out of the checkpoint, nothing else.

Seconds are the slowest process's; applied rounds merge each stage's ``OuterUpdate`` of the same
round into one entry, with norms combined over stages as sqrt(sum of squares) and the round's
verdicts, one per contributing cluster, which every stage must have reached alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from records.commitments import InnerCommitments
from records.outer_step import Quorum
from trainer.data.assignment import AssignmentRule
from trainer.errors import TrainerError
from trainer.outer.accounting import owner_reduce_cluster_bytes
from trainer.outer.owner_reduce import owner_shares, share_bytes
from trainer.outer.protocol import OuterUpdate
from trainer.recorder import (
    AnomalyFlag,
    AppliedRound,
    ContributionDigest,
    OuterStepReport,
)
from trainer.runtime.exchange import ContributionHeader


@dataclass(frozen=True, kw_only=True)
class RankReport:
    """One process's share of an outer step, sent once its files are saved."""

    cluster: int
    stage: int
    files: Mapping[str, str]
    updates: Sequence[OuterUpdate]
    eval_loss: float | None
    compute_seconds: float
    comm_seconds: float
    exposed_comm_seconds: float
    quorum_seconds: float
    """Time waiting for the step's quorum."""
    bytes_sent: int
    """Bytes this process put on the wire between clusters in the step."""
    commitments: InnerCommitments | None = None
    """This process's per-inner-step commitments (None for AllReduce)."""


def build_report(
    *,
    step: int,
    inner_steps: int,
    method: str,
    first_inner_step: int,
    tokens_before: int,
    rule: AssignmentRule,
    quorum: Quorum,
    headers: Mapping[tuple[int, int], ContributionHeader],
    reports: Sequence[RankReport],
    wall_seconds: float,
    data_parallel: int = 1,
    owner_reduce: bool = False,
) -> OuterStepReport:
    """``headers``: (cluster, stage) -> header, for every stage of every cluster of ``quorum``.
    With ``data_parallel`` D > 1 the metrics add ``bytes_sent_per_replica``: the most bytes one
    process put on the wire between clusters (its 1/D slice of its stage's payload, as each
    replica 0 measured and reported it)."""
    clusters = list(quorum.clusters)
    numbers = [headers[(c, 0)].numbers for c in clusters if (c, 0) in headers]
    evals = [
        r.eval_loss
        for r in sorted(reports, key=lambda r: (r.cluster, r.stage))
        if r.eval_loss is not None
    ]
    step_tokens = len(clusters) * inner_steps * rule.sequences_per_step * rule.context
    sent = _owner_reduce_sent(headers) if owner_reduce else _bytes_sent(method, headers, reports)
    metrics: dict[str, float] = {
        "train_loss": _mean([n.train_loss for n in numbers]),
        "lr": numbers[0].lr if numbers else math.nan,
        "grad_norm": max((n.grad_norm for n in numbers), default=math.nan),
        "tokens": float(tokens_before + step_tokens),
        "step_tokens": float(step_tokens),
        "compute_seconds": max((r.compute_seconds for r in reports), default=0.0),
        "comm_seconds": max((r.comm_seconds for r in reports), default=0.0),
        "exposed_comm_seconds": max((r.exposed_comm_seconds for r in reports), default=0.0),
        "quorum_seconds": max((r.quorum_seconds for r in reports), default=0.0),
        "wall_seconds": wall_seconds,
        "bytes_sent": float(max(sent.values(), default=0)),
        "bytes_sent_all_clusters": float(sum(sent.values())),
    }
    if data_parallel > 1:
        metrics["bytes_sent_per_replica"] = float(max((r.bytes_sent for r in reports), default=0))
    if evals:
        metrics["eval_loss"] = evals[0]
        metrics["perplexity"] = math.exp(min(evals[0], 80.0))
    pseudo_norms = _per_cluster_norm(headers, "pseudo_gradient_norm")
    if pseudo_norms:
        metrics["pseudo_gradient_norm"] = sum(pseudo_norms.values()) / len(pseudo_norms)
    applied = _applied_rounds(reports)
    if applied:
        latest = applied[-1]
        metrics["rank"] = float(latest.rank)
        metrics["bits"] = float(latest.bits)
        metrics.update({k: v for k, v in latest.stats.items() if not k.startswith("stage")})
    contributions = [
        ContributionDigest(cluster=c, stage=s, digest=h.digest)
        for (c, s), h in sorted(headers.items())
        if h.digest
    ]
    files: dict[str, str] = {}
    for r in reports:
        files.update(r.files)
    return OuterStepReport(
        step=step,
        inner_steps=inner_steps,
        method=method,
        metrics=metrics,
        data_ranges=[rule.data_range(c, first_inner_step, inner_steps) for c in clusters],
        contribution_digests=contributions,
        applied=applied,
        anomalies=[a for round_ in applied for a in round_.anomalies],
        files=dict(sorted(files.items())),
        quorum=quorum,
        commitments=[
            r.commitments
            for r in sorted(reports, key=lambda r: (r.cluster, r.stage))
            if r.commitments is not None
        ],
    )


def _mean(values: Sequence[float]) -> float:
    total = 0.0
    for value in values:  # in cluster order: the sum's order is part of the result
        total += value
    return total / len(values) if values else math.nan


def _bytes_sent(
    method: str,
    headers: Mapping[tuple[int, int], ContributionHeader],
    reports: Sequence[RankReport],
) -> dict[int, int]:
    """What each cluster put on the wire between clusters, summed over its stages: its payloads
    (from the headers: known for every contributor), or, for the AllReduce baseline, the
    gradients its processes reported."""
    sent: dict[int, int] = {}
    if method == "allreduce":
        for r in reports:
            sent[r.cluster] = sent.get(r.cluster, 0) + r.bytes_sent
    else:
        for (cluster, _), header in headers.items():
            sent[cluster] = sent.get(cluster, 0) + header.length
    return sent


def _owner_reduce_sent(headers: Mapping[tuple[int, int], ContributionHeader]) -> dict[int, int]:
    """What each contributor sends of this step's round in the owner-reduce exchange, summed
    over its stages: a function of the round's segment lengths and contributors (the headers),
    so a re-execution reports the same numbers (trainer/outer/accounting.py)."""
    stages: dict[int, dict[int, ContributionHeader]] = {}
    for (cluster, stage), header in headers.items():
        stages.setdefault(stage, {})[cluster] = header
    sent: dict[int, int] = {}
    for by_cluster in stages.values():
        clusters = sorted(by_cluster)
        lengths = list(by_cluster[clusters[0]].segments)
        shares = [share_bytes(lengths, s) for s in owner_shares(lengths, len(clusters))]
        for owner, cluster in enumerate(clusters):
            sent[cluster] = sent.get(cluster, 0) + owner_reduce_cluster_bytes(
                share_bytes=shares, owner=owner
            )
    return sent


def _per_cluster_norm(
    headers: Mapping[tuple[int, int], ContributionHeader], key: str
) -> dict[int, float]:
    squares: dict[int, float] = {}
    for (cluster, _), header in sorted(headers.items()):
        if key in header.stats:
            squares[cluster] = squares.get(cluster, 0.0) + header.stats[key] ** 2
    return {c: math.sqrt(v) for c, v in squares.items()}


def _applied_rounds(reports: Sequence[RankReport]) -> list[AppliedRound]:
    """Merge the per-stage updates of each round. Every cluster applies the same gathered
    payloads, so the lowest-numbered reporting cluster's processes speak for the round (one
    per stage): cluster 0's, which always reports (it records)."""
    if not reports:
        return []
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
                        for cluster, digest in zip(
                            update.clusters, update.contribution_digests, strict=True
                        )
                    ),
                    key=lambda c: (c.cluster, c.stage),
                ),
                anomalies=[
                    AnomalyFlag(
                        round=round_, cluster=v.cluster, reason=v.reason, excluded=v.excluded
                    )
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
