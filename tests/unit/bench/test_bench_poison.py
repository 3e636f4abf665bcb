"""``veritrain bench poison`` against the trainer's verdicts: a clean run flags no one, and the
cluster that trains on other data -- which the online rules cannot tell from an honest one
(docs/outer-algorithm.md §4) -- is caught by re-executing its contribution, as ``veritrain
audit`` does for a drawn pair; and what the bench reports. The other attacks are in
test_bench_poison_sent.py and test_bench_poison_lazy.py (tests/unit/bench/poison_bench_setup.py
is the shared set-up)."""

from __future__ import annotations

import pytest
from poison_bench_setup import ATTACKER, ROUNDS, Setup, poison_setup, simulate_attack

from veritrain.bench.poison import AttackResult, PoisonBenchResult
from veritrain.bench.poison_run import PoisonRun, RunOutcome, attacked_rounds


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    return poison_setup(tmp_path_factory.mktemp("poison-data"))


@pytest.fixture(scope="module")
def other_data(setup: Setup) -> tuple[PoisonRun, RunOutcome]:
    """One simulated run whose attacker trains on other data (both of its tests read it)."""
    return simulate_attack(setup, "lazy_other_data")


def test_a_clean_run_flags_no_one(setup: Setup) -> None:
    _, outcome = simulate_attack(setup, None)
    assert [[v.flags for v in round_] for round_ in outcome.verdicts] == [[()] * 4] * ROUNDS
    for round_ in outcome.verdicts:  # every contribution scored, and every honest one helps
        assert all(v.score is not None and v.score.held_out < 0 for v in round_)


def test_a_cluster_trained_on_other_data_passes_the_online_rules(
    other_data: tuple[PoisonRun, RunOutcome],
) -> None:
    """Its update is an honest update of other windows: norm, direction and held-out gain are
    those of an honest cluster, and its own-data advantage is within the noise on this model
    (what catches it is re-executing its inner steps: ``veritrain reproduce --cluster J``)."""
    attack, outcome = other_data
    for t in attacked_rounds(attack):
        verdicts = outcome.verdicts[t]
        assert [v.flags for v in verdicts] == [()] * 4
        gains = sorted(
            -v.score.held_out for v in verdicts if v.score is not None and v.cluster != ATTACKER
        )
        mine = verdicts[ATTACKER].score
        assert mine is not None and 0.5 * gains[1] < -mine.held_out < 2 * gains[1]


def test_re_executing_the_lazy_cluster_catches_it_in_every_round_it_was_lazy_only(
    other_data: tuple[PoisonRun, RunOutcome],
) -> None:
    """What ``veritrain audit`` does to a drawn pair: the attacker's H inner steps taken again
    on its assigned windows. The cluster that trained on other data, which no verdict flags, is
    caught in each round it was lazy; its honest rounds match bit for bit."""
    attack, outcome = other_data
    assert outcome.reexecuted == [t in attacked_rounds(attack) for t in range(ROUNDS)]


def test_the_result_reports_rates_and_loss_gaps() -> None:
    result = PoisonBenchResult(
        config={"preset": "tiny", "clusters": 4, "outer_steps": 8, "inner_steps": 20, "seeds": 1}
    )
    result.clean_losses = [2.0]
    result.honest_judgements, result.false_positives = 32, 1
    result.attacks["scale"] = AttackResult(
        active_rounds=6, detected_rounds=6, losses_excluded=[2.02], losses_kept=[30.0]
    )
    d = result.to_dict()
    assert d["false_positive_rate"] == 1 / 32
    assert d["attacks"]["scale"]["detection_rate"] == 1.0
    assert d["attacks"]["scale"]["loss_gap_with_exclusion"] == pytest.approx(0.01)
    assert d["attacks"]["scale"]["meets_targets"] is True
    assert any(line.startswith("scale") and "6/6" in line for line in result.lines())


def test_the_result_reports_the_audit_sample_that_catches_a_lazy_cluster() -> None:
    result = PoisonBenchResult(
        config={"preset": "tiny", "clusters": 4, "outer_steps": 5, "inner_steps": 10, "seeds": 1}
    )
    result.clean_losses = [2.0]
    result.attacks["lazy_other_data"] = AttackResult(
        active_rounds=3,
        reexecuted_caught=3,
        reexecuted_honest=2,
        pairs=20,
        losses_excluded=[2.0],
        losses_kept=[2.0],
    )
    d = result.to_dict()["attacks"]["lazy_other_data"]
    assert (d["detection_rate"], d["reexecution_rate"]) == (0.0, 1.0)
    assert d["audit_sample_for_95"] == 12  # 1 - C(17,12)/C(20,12) = 0.951; K = 11 gives 0.93
