"""A recorded DiLoCoX run whose payloads are combined by owners (3 clusters x 2 stages:
``exchange="auto"`` resolves to ``"owner-reduce"``, and the genesis records that; the
real multi-process trainer over torchft into a real ledger and store), one cluster poisoned: no
cluster received another's whole payload, yet the verdicts from the owners' statistics exclude
the poisoned cluster, ``veritrain verify`` recomputes every verdict and the weights from the
signed payloads bit for bit, and ``veritrain reproduce`` re-executes a step and a cluster's
contribution bitwise."""

from __future__ import annotations

from dataclasses import replace

import pytest

from records import OuterStep
from trainer.config import PoisonForTesting, with_overrides
from trainer.presets import run_preset
from veritrain.audit.reproduce import reproduce_step
from veritrain.audit.verify import verify_run
from veritrain.record.training import train_recorded
from veritrain.settings import Settings, load_settings
from veritrain.sources import DirectSource
from veritrain.sources.recorded_run import RecordedRun

RUN_ID = "owner-reduce"
POISONED, STEP = 2, 1
"""Cluster 2 sends 100x its pseudo-gradient in outer step 1 (overlapped: applied in step 2)."""


@pytest.fixture(scope="module")
def owner_run(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    settings = load_settings(data_dir=tmp_path_factory.mktemp("owner") / "veritrain-data")
    base = with_overrides(
        run_preset("tiny"),
        run_id=RUN_ID,
        method="dilocox",
        clusters=3,
        outer_steps=3,
        inner_steps=4,
    )
    config = replace(
        base,
        outer=replace(base.outer, exchange="auto"),  # as `bench comm` runs it
        poison_for_testing=PoisonForTesting(
            cluster=POISONED, step=STEP, kind="scale", factor=100.0
        ),
    )
    train_recorded(settings, config, quiet=True)
    return settings


def _steps(settings: Settings) -> list[OuterStep]:
    with DirectSource(settings) as source:
        run = RecordedRun.load(source, RUN_ID)
        outer = run.genesis.hyperparameters["outer"]
        assert (outer["exchange"], outer["anomaly_scores"]) == ("owner-reduce", False)
        return [step for _, step in run.outer_steps]


def test_the_owners_statistics_exclude_the_poisoned_cluster(owner_run: Settings) -> None:
    recorded = _steps(owner_run)
    (applied,) = [a for step in recorded for a in step.applied if a.round == STEP]
    verdicts = {v.cluster: v for v in applied.verdicts}
    assert set(verdicts) == {0, 1, 2}
    assert "large_norm" in verdicts[POISONED].flags and verdicts[POISONED].excluded
    assert [verdicts[c].flags for c in (0, 1)] == [(), ()]
    assert all(v.score is None for v in verdicts.values())  # judged on statistics alone
    # Each cluster sent about 2(C-1)/C of its payloads, not C-1 of them.
    step = recorded[-1]
    payload = sum(a.payload_bytes for a in step.applied)
    assert 0 < step.metrics["bytes_sent"] < 2 * payload


def test_verify_recomputes_the_verdicts_and_weights_from_the_signed_payloads(
    owner_run: Settings,
) -> None:
    with DirectSource(owner_run) as source:
        report = verify_run(source, RUN_ID, deep=True)
    assert report.ok, report.render()


def test_reproduce_re_executes_a_step_and_a_contribution_bitwise(owner_run: Settings) -> None:
    with DirectSource(owner_run) as source:
        whole = reproduce_step(source, RUN_ID, 2)
        one = reproduce_step(source, RUN_ID, 1, cluster=0)
    assert whole.ok, whole.render()
    assert whole.mode == "bitwise"
    assert one.ok, one.render()
