"""One verdict per cluster: statistics combined over stages, the rules of verdict.py, exclusion
only with a majority, and a split into stages that changes nothing."""

from __future__ import annotations

import math

import pytest
import torch
from outer_helpers import SIGNALS, build_clusters, start_locals, train_locals

from records.outer_step import ContributionScore
from trainer.checkpoint_layout import exchange_tensors, read_exchange
from trainer.outer import Gathered, OuterConfig, OuterLoop
from trainer.outer.errors import OuterStateError
from trainer.outer.verdict import (
    ContributionStatistics,
    Measures,
    VerdictHistory,
    VerdictRule,
    decide,
)

RULE = VerdictRule.from_config(OuterConfig())
DIGESTS = [f"{i:064x}" for i in range(1, 9)]


def honest(n: int, *, seed: int = 0) -> list[list[torch.Tensor]]:
    """n contributions that share a direction (clusters training one model agree)."""
    g = torch.Generator().manual_seed(seed)
    common = [torch.randn(200, 100, generator=g), torch.randn(100, generator=g)]
    return [[c + 0.8 * torch.randn(c.shape, generator=g) for c in common] for _ in range(n)]


def measures(
    contributions: list[list[torch.Tensor]], earlier: frozenset[str] = frozenset()
) -> list[Measures]:
    stats = ContributionStatistics.measure(
        contributions, previous=None, digests=DIGESTS[: len(contributions)], earlier=earlier
    )
    return stats.measures()


def score(held_out: float, own_data: float) -> ContributionScore:
    return ContributionScore(held_out=held_out, own_data=own_data)


def test_statistics_of_stages_combined_equal_those_of_the_whole_model() -> None:
    whole = honest(4)
    stage_a = ContributionStatistics.measure(
        [c[:1] for c in whole], previous=None, digests=DIGESTS[:4]
    )
    stage_b = ContributionStatistics.measure(
        [c[1:] for c in whole], previous=None, digests=DIGESTS[4:8]
    )
    combined = ContributionStatistics.combine([stage_a, stage_b])
    for got, want in zip(combined.measures(), measures(whole), strict=True):
        assert got.norm == pytest.approx(want.norm, rel=1e-12)
        assert got.agreement == pytest.approx(want.agreement, rel=1e-12)
    assert combined.digests[2] == (DIGESTS[2], DIGESTS[6])  # cluster 2's payloads, stage order


def test_statistics_travel_as_floats_unchanged() -> None:
    g = torch.Generator().manual_seed(5)
    previous = [torch.randn(200, 100, generator=g), torch.randn(100, generator=g)]
    stats = ContributionStatistics.measure(
        honest(3), previous=previous, digests=DIGESTS[:3], earlier=frozenset({DIGESTS[1]})
    )
    assert ContributionStatistics.from_floats(stats.to_floats()) == stats
    assert stats.repeated == (0, 1, 0)


def test_honest_clusters_are_clean() -> None:
    verdicts = decide(RULE, measures(honest(4)), [score(-0.2, -0.3)] * 4, VerdictHistory(8))
    assert [v.flags for v in verdicts] == [()] * 4
    assert not any(v.excluded for v in verdicts)


@pytest.mark.parametrize(
    ("attack", "flag"),
    [("scale", "large_norm"), ("sign", "direction"), ("noise", "direction"), ("zero", "empty")],
)
def test_each_statistical_attack_is_flagged_and_excluded_among_four(attack: str, flag: str) -> None:
    contributions = honest(4)
    g = torch.Generator().manual_seed(9)
    bad = contributions[2]
    if attack == "scale":
        contributions[2] = [100 * t for t in bad]
    elif attack == "sign":
        contributions[2] = [-t for t in bad]
    elif attack == "noise":
        noise = [torch.randn(t.shape, generator=g) for t in bad]
        size = math.sqrt(
            sum(float(t.pow(2).sum()) for t in bad) / sum(float(n.pow(2).sum()) for n in noise)
        )
        contributions[2] = [n * size for n in noise]
    else:
        contributions[2] = [torch.zeros_like(t) for t in bad]
    verdicts = decide(RULE, measures(contributions), None, VerdictHistory(8))
    assert [flag in v.flags for v in verdicts] == [False, False, True, False]
    assert [v.excluded for v in verdicts] == [False, False, True, False]


def test_a_replayed_payload_is_flagged() -> None:
    verdicts = decide(
        RULE, measures(honest(4), earlier=frozenset({DIGESTS[3]})), None, VerdictHistory(8)
    )
    assert [v.flags for v in verdicts] == [(), (), (), ("replayed",)]


def test_a_harmful_contribution_is_flagged_by_its_held_out_score() -> None:
    scores = [score(-0.20, -0.30), score(-0.21, -0.32), score(+0.50, +0.40), score(-0.19, -0.29)]
    verdicts = decide(RULE, measures(honest(4)), scores, VerdictHistory(8))
    assert [v.flags for v in verdicts] == [(), (), ("held_out",), ()]
    assert verdicts[2].excluded
    assert verdicts[2].score == scores[2]


def test_with_the_own_data_check_a_cluster_no_better_on_its_own_data_is_flagged() -> None:
    """Trained on other data: it helps held-out data as much as the others, its own less."""
    scores = [score(-0.20, -0.30), score(-0.21, -0.32), score(-0.20, -0.15), score(-0.19, -0.29)]
    assert [v.flags for v in decide(RULE, measures(honest(4)), scores, VerdictHistory(8))] == [
        ()
    ] * 4
    rule = VerdictRule.from_config(OuterConfig(anomaly_own_data_check=True))
    verdicts = decide(rule, measures(honest(4)), scores, VerdictHistory(8))
    assert [v.flags for v in verdicts] == [(), (), ("own_data",), ()]
    assert "own data" in verdicts[2].reason


def test_a_cluster_that_took_a_fraction_of_the_inner_steps_is_flagged_by_its_norm() -> None:
    contributions = honest(4)
    contributions[0] = [0.4 * t for t in contributions[0]]
    verdicts = decide(RULE, measures(contributions), None, VerdictHistory(8))
    assert [v.flags for v in verdicts] == [("small_norm",), (), (), ()]
    assert verdicts[0].excluded


def test_two_clusters_record_flags_but_exclude_nothing() -> None:
    contributions = honest(2)
    contributions[1] = [100 * t for t in contributions[1]]
    verdicts = decide(RULE, measures(contributions), None, VerdictHistory(8))
    assert [v.flags for v in verdicts] == [(), ("large_norm",)]
    assert [v.excluded for v in verdicts] == [False, False]


def test_no_exclusion_without_a_majority_of_unflagged_clusters() -> None:
    contributions = honest(4)
    contributions[1] = [100 * t for t in contributions[1]]
    contributions[3] = [100 * t for t in contributions[3]]
    verdicts = decide(RULE, measures(contributions), None, VerdictHistory(8))
    assert [bool(v.flags) for v in verdicts] == [False, True, False, True]
    assert not any(v.excluded for v in verdicts)


def test_non_finite_is_excluded_even_between_two_clusters() -> None:
    contributions = honest(2)
    contributions[0][0][3, 4] = math.nan
    verdicts = decide(RULE, measures(contributions), None, VerdictHistory(8))
    assert (
        verdicts[0].flags == ("non_finite",) and verdicts[0].excluded and verdicts[0].norm is None
    )
    assert verdicts[1].excluded is False


def test_exclusion_can_be_turned_off() -> None:
    rule = VerdictRule.from_config(OuterConfig(anomaly_exclude=False))
    contributions = honest(4)
    contributions[0] = [100 * t for t in contributions[0]]
    verdicts = decide(rule, measures(contributions), None, VerdictHistory(8))
    assert verdicts[0].flags == ("large_norm",) and not verdicts[0].excluded


def test_stages_of_one_cluster_reach_one_verdict_when_each_sees_a_part() -> None:
    """Cluster 1 is scaled in stage 1 only: stage 1 alone would flag it and stage 0 would not;
    with combined statistics both stages exclude it."""
    g = torch.Generator().manual_seed(3)
    shapes = [[(20, 10), (10,)], [(30, 10), (30,)]]
    stages = [
        [(f"s{s}.p{k}", torch.randn(shape, generator=g) * 0.02) for k, shape in enumerate(stage)]
        for s, stage in enumerate(shapes)
    ]
    config = OuterConfig()
    loops = [build_clusters(config, named, 3) for named in stages]  # loops[stage][cluster]
    locals_ = [start_locals(named, 3) for named in stages]
    for s, named in enumerate(stages):
        train_locals(locals_[s], named, round=0)
    start = [p.clone() for _, p in stages[1]]
    for p, p0 in zip(locals_[1][1], start, strict=True):  # cluster 1, stage 1: a 100x update
        p.copy_(p0 - 100 * (p0 - p))
    gathered = [
        [loops[s][c].contribution(0, locals_[s][c]).payload for c in range(3)] for s in range(2)
    ]
    for c in range(3):
        examinations = [loops[s][c].examine(0, gathered[s]) for s in range(2)]  # type: ignore[attr-defined]
        combined = ContributionStatistics.combine([e.statistics for e in examinations])
        stage_alone = [
            decide(RULE, e.statistics.measures(), None, VerdictHistory(8)) for e in examinations
        ]
        assert [bool(v.flags) for v in stage_alone[0]] == [False, False, False]
        assert [bool(v.flags) for v in stage_alone[1]] == [False, True, False]
        for s, examination in enumerate(examinations):
            loop = loops[s][c]
            assert isinstance(loop, OuterLoop)
            verdicts = loop.rule_on(examination, combined, None)
            update = loop.commit(examination, verdicts, locals_[s][c], SIGNALS)
            assert [(v.cluster, v.excluded) for v in update.verdicts] == [
                (0, False),
                (1, True),
                (2, False),
            ]
            assert update.stats["included_clusters"] == 2.0


def test_the_verdict_history_survives_a_resume_before_and_after_the_first_round() -> None:
    """state_dict before any round (nothing judged yet) and after one loads back exactly."""
    g = torch.Generator().manual_seed(1)
    named = [("w", torch.randn(12, 8, generator=g)), ("b", torch.zeros(12))]
    (loop, other) = build_clusters(OuterConfig(), named, 2)
    fresh = build_clusters(OuterConfig(), named, 2)[0]
    fresh.load_state_dict(loop.state_dict())  # nothing judged yet
    locals_ = start_locals(named, 2)
    train_locals(locals_, named, round=0)
    loop.note_round_data(0, first_inner_step=0, inner_steps=5)  # type: ignore[attr-defined]
    gathered = [a.contribution(0, p).payload for a, p in zip((loop, other), locals_, strict=True)]
    loop.apply(0, Gathered(gathered), locals_[0], SIGNALS)
    again = build_clusters(OuterConfig(), named, 2)[0]
    again.load_state_dict(loop.state_dict())
    assert isinstance(loop, OuterLoop) and isinstance(again, OuterLoop)
    assert again.history.norms == loop.history.norms and again.history.norms != []
    assert again._recent_digests == loop._recent_digests and len(again._recent_digests[0]) == 2


def test_a_round_judges_only_the_clusters_of_its_quorum() -> None:
    """Cluster 1 of four is not in the round's quorum: three clusters are judged, named by
    their own indices, and a 100x cluster 3 is excluded by the majority of those three."""
    contributions = honest(3)
    contributions[2] = [100 * t for t in contributions[2]]
    verdicts = decide(RULE, measures(contributions), None, VerdictHistory(8), clusters=[0, 2, 3])
    assert [(v.cluster, v.flags, v.excluded) for v in verdicts] == [
        (0, (), False),
        (2, (), False),
        (3, ("large_norm",), True),
    ]


def test_a_quorum_of_two_records_the_flag_and_excludes_nothing() -> None:
    """Four clusters in the run, two in the round: no majority to exclude by."""
    contributions = honest(2)
    contributions[1] = [100 * t for t in contributions[1]]
    verdicts = decide(RULE, measures(contributions), None, VerdictHistory(8), clusters=[1, 3])
    assert [(v.cluster, v.flags, v.excluded) for v in verdicts] == [
        (1, (), False),
        (3, ("large_norm",), False),
    ]


def test_clusters_of_a_round_must_match_its_measures() -> None:
    with pytest.raises(
        OuterStateError, match=r"expected 2 distinct clusters in ascending order, got \[2, 0\]"
    ):
        decide(RULE, measures(honest(2)), None, VerdictHistory(8), clusters=[2, 0])


def test_apply_on_a_quorum_excludes_within_it_and_keeps_the_payloads_by_cluster() -> None:
    """A run of four; round 0's quorum is clusters 0, 1 and 3, and cluster 3 sends 100x its
    update: every member excludes cluster 3, averages clusters 0 and 1, and keeps the three
    payloads under their clusters' indices (what the checkpoint's exchange file stores)."""
    g = torch.Generator().manual_seed(11)
    named = [("w", torch.randn(16, 8, generator=g) * 0.02), ("b", torch.zeros(16))]
    loops = build_clusters(OuterConfig(), named, 4)
    locals_ = start_locals(named, 4)
    train_locals(locals_, named, round=0)
    quorum = [0, 1, 3]
    for p, (_, p0) in zip(locals_[3], named, strict=True):
        p.copy_(p0 - 100 * (p0 - p))
    gathered = [loops[c].contribution(0, locals_[c]).payload for c in quorum]
    updates = [loops[c].apply(0, Gathered(gathered, quorum), locals_[c], SIGNALS) for c in quorum]
    for update in updates:
        assert [(v.cluster, v.excluded) for v in update.verdicts] == [
            (0, False),
            (1, False),
            (3, True),
        ]
        assert update.stats["included_clusters"] == 2.0
    loop = loops[0]
    assert isinstance(loop, OuterLoop)
    stored = read_exchange(exchange_tensors(loop.applied_payloads()))
    assert sorted(stored[0]) == quorum
    assert all(torch.equal(stored[0][c], p) for c, p in zip(quorum, gathered, strict=True))


# The agreements `veritrain demo` recorded (2 honest clusters, DiLoCoX, 6 rounds): honest
# pseudo-gradients decorrelate as the loss flattens. Under v1 the last round's 0.20 fell below
# 0.3 x the median of the earlier rounds (0.71) and both honest clusters were flagged.
DEMO_AGREEMENTS = [0.777, 0.712, 0.813, 0.456, 0.299, 0.200]
DEMO_PREVIOUS = [(None, None), (0.021, 0.043), (0.060, 0.077), (0.159, 0.150), (0.107, 0.104)]


def demo_flags(rule: VerdictRule) -> list[list[tuple[str, ...]]]:
    history = VerdictHistory(rule.history)
    flags = []
    for t, agreement in enumerate(DEMO_AGREEMENTS):
        previous = DEMO_PREVIOUS[t] if t < len(DEMO_PREVIOUS) else (0.191, 0.185)
        round_measures = [
            Measures(norm=4.0, agreement=agreement, previous=p, repeated=False) for p in previous
        ]
        verdicts = decide(rule, round_measures, None, history)
        history.accept(verdicts)
        flags.append([v.flags for v in verdicts])
    return flags


def test_an_honest_two_cluster_run_whose_agreement_falls_is_not_flagged() -> None:
    assert RULE.name == "veritrain.verdict/v2"  # what a new run records
    assert demo_flags(RULE) == [[(), ()]] * len(DEMO_AGREEMENTS)


def test_runs_recorded_under_v1_are_still_judged_by_v1() -> None:
    v1 = VerdictRule.from_config(OuterConfig(anomaly_rule="veritrain.verdict/v1"))
    assert demo_flags(v1)[-1] == [("direction",), ("direction",)]  # what such a run recorded


def test_v2_flags_a_direction_far_below_this_rounds_other_clusters() -> None:
    contributions = honest(4)
    g = torch.Generator().manual_seed(9)
    contributions[2] = [
        0.05 * c + torch.randn(c.shape, generator=g) for c in contributions[2]
    ]  # mostly its own direction: a cosine of a few hundredths, the others' about 0.6
    verdicts = decide(RULE, measures(contributions), None, VerdictHistory(8))
    assert [v.flags for v in verdicts] == [(), (), ("direction",), ()]
    assert "expected >= " in verdicts[2].reason
