"""Combining every process's share of an outer step into the record the ledger will hold."""

from __future__ import annotations

import math

import pytest

from records.outer_step import ClusterVerdict
from trainer.data.assignment import AssignmentRule
from trainer.errors import TrainerError
from trainer.outer.protocol import Anomaly, OuterUpdate
from trainer.runtime.report import RankReport, build_record

RULE = AssignmentRule(context=8, sequences_per_step=4, clusters=2, seed=0, shard_tokens=64,
                      train_shards=(0, 1, 3), eval_shards=(2,))


def verdict(cluster: int, *, flagged: bool = False, excluded: bool = False) -> ClusterVerdict:
    return ClusterVerdict(
        cluster=cluster, norm=1.0, agreement=0.8, previous=None, score=None,
        flags=("large_norm",) if flagged else (), reason="norm 80x" if flagged else "", excluded=excluded,
    )


VERDICTS = [verdict(0), verdict(1, flagged=True)]


def update(stage: int, *, verdicts: list[ClusterVerdict] = VERDICTS) -> OuterUpdate:
    return OuterUpdate(
        round=3,
        contribution_digests=[f"c0s{stage}", f"c1s{stage}"],
        anomalies=[Anomaly(cluster=v.cluster, reason=v.reason, excluded=v.excluded) for v in verdicts if v.flags],
        verdicts=verdicts,
        payload_bytes=100 * (stage + 1),
        rank=4,
        bits=8,
        stats={"outer_step_norm": 3.0 if stage == 0 else 4.0, "included_clusters": 2.0},
    )


def report(cluster: int, stage: int, **changes: object) -> RankReport:
    values: dict[str, object] = {
        "cluster": cluster,
        "stage": stage,
        "files": {f"inner-{cluster}-{stage}": "d"},
        "contribution_digest": f"c{cluster}s{stage}",
        "contribution_stats": {"pseudo_gradient_norm": 1.0},
        "updates": [update(stage)],
        "train_loss": (2.0 + cluster) if stage == 1 else None,
        "eval_loss": 1.5 if (cluster, stage) == (0, 1) else None,
        "grad_norm": 0.5,
        "lr": 0.01,
        "compute_seconds": 1.0 + cluster,
        "comm_seconds": 0.2,
        "exposed_comm_seconds": 0.1,
        "bytes_sent": 100 * (stage + 1),
    }
    values.update(changes)
    return RankReport(**values)  # type: ignore[arg-type]


def test_record_combines_losses_seconds_bytes_and_norms() -> None:
    reports = [report(c, s) for c in (0, 1) for s in (0, 1)]
    record = build_record(step=3, inner_steps=5, method="dilocox", first_inner_step=15, tokens_before=1000,
                          rule=RULE, reports=reports, wall_seconds=2.5)
    m = record.metrics
    assert m["train_loss"] == 2.5  # mean over clusters of each cluster's last-stage loss
    assert m["eval_loss"] == 1.5 and m["perplexity"] == pytest.approx(math.exp(1.5))
    assert m["compute_seconds"] == 2.0  # the slowest process
    assert m["bytes_sent"] == 300  # one cluster, both stages
    assert m["step_tokens"] == 2 * 5 * 4 * 8 and m["tokens"] == 1000 + 320
    assert m["outer_step_norm"] == pytest.approx(5.0)  # sqrt(3^2 + 4^2) over the stages
    assert m["pseudo_gradient_norm"] == pytest.approx(math.sqrt(2.0))
    assert (m["rank"], m["bits"]) == (4, 8)


def test_record_lists_every_contribution_and_one_verdict_per_cluster() -> None:
    reports = [report(c, s) for c in (0, 1) for s in (0, 1)]
    record = build_record(step=3, inner_steps=5, method="dilocox", first_inner_step=15, tokens_before=0,
                          rule=RULE, reports=reports, wall_seconds=1.0)
    assert [(c.cluster, c.stage, c.digest) for c in record.contribution_digests] == [
        (0, 0, "c0s0"), (0, 1, "c0s1"), (1, 0, "c1s0"), (1, 1, "c1s1"),
    ]
    (applied,) = record.applied
    assert applied.round == 3 and applied.payload_bytes == 300
    assert [(c.cluster, c.stage) for c in applied.contribution_digests] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [(a.round, a.cluster, a.reason) for a in record.anomalies] == [(3, 1, "norm 80x")]
    assert applied.verdicts == VERDICTS
    assert record.flagged_clusters == [1]
    assert len(record.files) == 4


def test_stages_that_reach_different_verdicts_are_refused() -> None:
    """The verdict on a cluster is the cluster's, not a stage's: stage 1 excluding cluster 1
    while stage 0 keeps it would average different clusters in different stages."""
    split = [verdict(0), verdict(1, flagged=True, excluded=True)]
    reports = [report(c, s, updates=[update(s, verdicts=split if s == 1 else VERDICTS)]) for c in (0, 1) for s in (0, 1)]
    with pytest.raises(TrainerError, match="stage 1 reached others"):
        build_record(step=3, inner_steps=5, method="dilocox", first_inner_step=15, tokens_before=0,
                     rule=RULE, reports=reports, wall_seconds=1.0)


def test_data_ranges_follow_the_assignment_rule() -> None:
    reports = [report(c, s) for c in (0, 1) for s in (0, 1)]
    record = build_record(step=0, inner_steps=2, method="diloco", first_inner_step=0, tokens_before=0,
                          rule=RULE, reports=reports, wall_seconds=1.0)
    ranges = {r.cluster: r for r in record.data_ranges}
    assert ranges[1].sequences == 8 and ranges[1].tokens == 64
    read = {RULE.train_window(p)[0] for i in range(2) for p in RULE.positions(1, i)}
    assert {s for lo, hi in ranges[1].shards for s in range(lo, hi + 1)} == read


def test_allreduce_record_has_no_contributions() -> None:
    reports = [report(c, s, contribution_digest=None, contribution_stats={}, updates=[]) for c in (0, 1) for s in (0, 1)]
    record = build_record(step=0, inner_steps=2, method="allreduce", first_inner_step=0, tokens_before=0,
                          rule=RULE, reports=reports, wall_seconds=1.0)
    assert record.contribution_digests == [] and record.applied == [] and "rank" not in record.metrics
