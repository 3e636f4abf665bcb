"""``veritrain audit --sample K`` on a real recorded run in which one cluster trained a whole
outer step on data other than its assignment (docs/auditing.md, "Spot checks"): re-executing the
drawn (outer step, cluster) pairs names exactly that pair, and the report says how likely a
sample of that size was to catch such a cluster."""

from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from trainer.api import train
from trainer.config import with_overrides
from trainer.presets import run_preset
from trainer.runtime.forgery import Forgery
from veritrain.audit.spot_check import draw_pairs, spot_check
from veritrain.cli.main import app
from veritrain.record.training import recorder_factory
from veritrain.settings import Settings, load_settings
from veritrain.sources import DirectSource

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RUN_ID = "lazy"
LAZY, STEP = 1, 1
"""Cluster 1 trains outer step 1 on the windows of far-away inner steps."""
PAIRS = [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.fixture(scope="module")
def lazy_run(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    data_dir = tmp_path_factory.mktemp("lazy") / "veritrain-data"
    settings = load_settings(data_dir=data_dir)
    config = with_overrides(
        run_preset("tiny"),
        run_id=RUN_ID,
        method="diloco",
        stages=1,
        outer_steps=2,
        inner_steps=4,
    )
    train(
        config,
        recorder_factory(settings),
        data_dir=data_dir / "corpus",
        quiet=True,
        forgery=Forgery(cluster=LAZY, step=STEP, kind="other_data"),
    )
    return settings


def test_a_sample_of_every_pair_catches_the_cluster_that_trained_on_other_data(
    lazy_run: Settings,
) -> None:
    with DirectSource(lazy_run) as source:
        check = spot_check(source, RUN_ID, 4, seed=0)

    assert (check.pairs, check.drawn, check.fewest_steps) == (4, PAIRS, 2)
    assert check.caught == [(STEP, LAZY)]
    assert not check.ok
    assert check.catches_lazy_cluster == 1.0
    text = check.render()
    assert "a cluster lazy in all of its 2 steps is caught with probability 100.0 %" in text
    assert f"step {STEP} cluster {LAZY}: NO MATCH" in text
    assert text.endswith(f"CAUGHT: step {STEP} cluster {LAZY}")


def test_the_audit_command_draws_with_a_seed_and_fails_on_a_lazy_pair(
    lazy_run: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed = next(s for s in range(100) if draw_pairs(PAIRS, 1, random.Random(s)) == [(1, 1)])
    monkeypatch.setenv("VERITRAIN_DATA_DIR", str(lazy_run.data_dir))
    result = CliRunner().invoke(
        app, ["audit", RUN_ID, "--sample", "1", "--seed", str(seed), "--json"]
    )
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert (report["drawn"], report["caught"]) == ([[1, 1]], [[1, 1]])
    assert report["catch_probability_lazy_cluster"] == pytest.approx(0.5)  # 1 - C(2,1)/C(4,1)
    assert report["seeded"] is True


def test_the_draw_is_the_auditors_own() -> None:
    draws = {tuple(draw_pairs(PAIRS, 2, random.SystemRandom())) for _ in range(200)}
    assert len(draws) == 6  # every pair of pairs comes up: nothing fixes the draw in advance
