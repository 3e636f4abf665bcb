"""Combining the round's headers and every process's report into the record the ledger will hold."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from records.outer_step import ClusterVerdict, Quorum
from trainer.data.assignment import AssignmentRule
from trainer.errors import TrainerError
from trainer.outer.protocol import Anomaly, OuterUpdate
from trainer.runtime.exchange import ClusterNumbers, ContributionHeader
from trainer.runtime.report import RankReport, build_report

RULE = AssignmentRule(
    context=8,
    sequences_per_step=4,
    clusters=3,
    seed=0,
    shard_tokens=64,
    train_shards=(0, 1, 3),
    eval_shards=(2,),
)
BOTH = Quorum(id=4, clusters=(0, 1), joined=(), left=())


def verdict(cluster: int, *, flagged: bool = False, excluded: bool = False) -> ClusterVerdict:
    return ClusterVerdict(
        cluster=cluster,
        norm=1.0,
        agreement=0.8,
        previous=None,
        score=None,
        flags=("large_norm",) if flagged else (),
        reason="norm 80x" if flagged else "",
        excluded=excluded,
    )


VERDICTS = [verdict(0), verdict(1, flagged=True)]


def update(stage: int, *, verdicts: list[ClusterVerdict] = VERDICTS) -> OuterUpdate:
    return OuterUpdate(
        round=3,
        clusters=[0, 1],
        contribution_digests=[f"c0s{stage}", f"c1s{stage}"],
        anomalies=[
            Anomaly(cluster=v.cluster, reason=v.reason, excluded=v.excluded)
            for v in verdicts
            if v.flags
        ],
        verdicts=verdicts,
        payload_bytes=100 * (stage + 1),
        rank=4,
        bits=8,
        stats={"outer_step_norm": 3.0 if stage == 0 else 4.0, "included_clusters": 2.0},
    )


def header(
    cluster: int, stage: int, *, digest: str | None = None, length: int | None = None
) -> ContributionHeader:
    return ContributionHeader(
        round=3,
        cluster=cluster,
        stage=stage,
        digest=f"c{cluster}s{stage}" if digest is None else digest,
        length=100 * (stage + 1) if length is None else length,
        signature_object=None,
        commitments_object=None,
        stats={"pseudo_gradient_norm": 1.0},
        numbers=ClusterNumbers(
            train_loss=2.0 + cluster,
            grad_norm=0.5 + cluster,
            lr=0.01,
            compute_seconds_per_step=0.2,
            comm_seconds=0.1,
        ),
    )


def headers(
    clusters: tuple[int, ...] = (0, 1), **changes: object
) -> dict[tuple[int, int], ContributionHeader]:
    return {(c, s): header(c, s, **changes) for c in clusters for s in (0, 1)}  # type: ignore[arg-type]


def report(cluster: int, stage: int, **changes: object) -> RankReport:
    values: dict[str, object] = {
        "cluster": cluster,
        "stage": stage,
        "files": {f"inner-{cluster}-{stage}": "d"},
        "updates": [update(stage)],
        "eval_loss": 1.5 if (cluster, stage) == (0, 1) else None,
        "compute_seconds": 1.0 + cluster,
        "comm_seconds": 0.2,
        "exposed_comm_seconds": 0.1,
        "quorum_seconds": 0.05 * (cluster + 1),
        "bytes_sent": 100 * (stage + 1),
    }
    values.update(changes)
    return RankReport(**values)  # type: ignore[arg-type]


def record_of(
    reports: list[RankReport], *, quorum: Quorum = BOTH, method: str = "dilocox", **kwargs: object
):  # type: ignore[no-untyped-def]
    return build_report(
        step=3,
        inner_steps=5,
        method=method,
        first_inner_step=15,
        tokens_before=1000,
        rule=RULE,
        quorum=quorum,
        headers=kwargs.pop("headers", headers(quorum.clusters)),  # type: ignore[arg-type]
        reports=reports,
        wall_seconds=2.5,
    )


def test_record_combines_losses_seconds_bytes_and_norms() -> None:
    record = record_of([report(c, s) for c in (0, 1) for s in (0, 1)])
    m = record.metrics
    assert m["train_loss"] == 2.5  # mean over the quorum's clusters of each cluster's loss
    assert m["grad_norm"] == 1.5  # the largest cluster's
    assert m["eval_loss"] == 1.5 and m["perplexity"] == pytest.approx(math.exp(1.5))
    assert m["compute_seconds"] == 2.0 and m["quorum_seconds"] == 0.1  # the slowest process
    assert (
        m["bytes_sent"] == 300 and m["bytes_sent_all_clusters"] == 600
    )  # one cluster's stages; all
    assert m["step_tokens"] == 2 * 5 * 4 * 8 and m["tokens"] == 1000 + 320
    assert m["outer_step_norm"] == pytest.approx(5.0)  # sqrt(3^2 + 4^2) over the stages
    assert m["pseudo_gradient_norm"] == pytest.approx(math.sqrt(2.0))
    assert (m["rank"], m["bits"]) == (4, 8)


def test_record_lists_every_contribution_and_one_verdict_per_cluster() -> None:
    record = record_of([report(c, s) for c in (0, 1) for s in (0, 1)])
    assert [(c.cluster, c.stage, c.digest) for c in record.contribution_digests] == [
        (0, 0, "c0s0"),
        (0, 1, "c0s1"),
        (1, 0, "c1s0"),
        (1, 1, "c1s1"),
    ]
    (applied,) = record.applied
    assert applied.round == 3 and applied.payload_bytes == 300
    assert [(c.cluster, c.stage) for c in applied.contribution_digests] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    assert [(a.round, a.cluster, a.reason) for a in record.anomalies] == [(3, 1, "norm 80x")]
    assert applied.verdicts == VERDICTS
    assert record.flagged_clusters == [1]
    assert len(record.files) == 4
    assert record.quorum == BOTH


def test_a_cluster_that_left_before_reporting_still_counts_for_what_it_committed_to() -> None:
    """Cluster 2 committed to its payload (its header is posted) and died before it saved: the
    record names its contribution, data and numbers, and lacks only its files and seconds."""
    quorum = Quorum(id=5, clusters=(0, 1, 2), joined=(), left=())
    record = record_of([report(c, s) for c in (0, 1) for s in (0, 1)], quorum=quorum)
    assert [r.cluster for r in record.data_ranges] == [0, 1, 2]
    assert {c.cluster for c in record.contribution_digests} == {0, 1, 2}
    assert record.metrics["train_loss"] == 3.0  # (2 + 3 + 4) / 3
    assert record.metrics["step_tokens"] == 3 * 5 * 4 * 8
    assert not any("2-" in name for name in record.files)


def test_stages_that_reach_different_verdicts_are_refused() -> None:
    """The verdict on a cluster is the cluster's, not a stage's: stage 1 excluding cluster 1
    while stage 0 keeps it would average different clusters in different stages."""
    split = [verdict(0), verdict(1, flagged=True, excluded=True)]
    reports = [
        report(c, s, updates=[update(s, verdicts=split if s == 1 else VERDICTS)])
        for c in (0, 1)
        for s in (0, 1)
    ]
    with pytest.raises(TrainerError, match="stage 1 reached others"):
        record_of(reports)


def test_verdicts_of_a_round_name_the_clusters_of_its_quorum() -> None:
    """Cluster 1 left: round 3's quorum is clusters 0 and 2, and so are its verdicts."""
    quorum = Quorum(id=6, clusters=(0, 2), joined=(), left=(1,))
    verdicts = [verdict(0), verdict(2, flagged=True)]

    def quorum_update(stage: int) -> OuterUpdate:
        return replace(
            update(stage, verdicts=verdicts),
            clusters=[0, 2],
            contribution_digests=[f"c0s{stage}", f"c2s{stage}"],
        )

    reports = [report(c, s, updates=[quorum_update(s)]) for c in (0, 2) for s in (0, 1)]
    record = record_of(reports, quorum=quorum)
    (applied,) = record.applied
    assert [v.cluster for v in applied.verdicts] == [0, 2]
    assert sorted({c.cluster for c in applied.contribution_digests}) == [0, 2]
    assert record.flagged_clusters == [2]


def test_data_ranges_follow_the_assignment_rule() -> None:
    record = record_of([report(c, s) for c in (0, 1) for s in (0, 1)])
    ranges = {r.cluster: r for r in record.data_ranges}
    assert ranges[1].sequences == 20 and ranges[1].tokens == 160
    read = {RULE.train_window(p)[0] for i in range(15, 20) for p in RULE.positions(1, i)}
    assert {s for lo, hi in ranges[1].shards for s in range(lo, hi + 1)} == read


def test_allreduce_record_has_no_contributions() -> None:
    reports = [report(c, s, updates=[]) for c in (0, 1) for s in (0, 1)]
    record = record_of(reports, method="allreduce", headers=headers(digest="", length=0))
    assert (
        record.contribution_digests == [] and record.applied == [] and "rank" not in record.metrics
    )
    assert record.metrics["bytes_sent"] == 300  # the gradients its processes reported
