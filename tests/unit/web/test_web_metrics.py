"""Metric series for the charts, and their server-side downsampling."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from unit.web.web_fixture_run import DemoRun, record_demo_run

from ledger.db import create_engine
from ledger.models import Metric
from web.app import create_app
from web.downsample import downsample
from web.settings import AppSettings


def test_every_recorded_point_without_max_points(client: TestClient, demo_run: DemoRun) -> None:
    response = client.get(f"/api/v1/runs/{demo_run.run_id}/metrics")

    assert response.status_code == 200
    body = response.json()
    assert [s["key"] for s in body["series"]] == demo_run.metric_keys
    loss = next(s for s in body["series"] if s["key"] == "train_loss")
    assert loss["steps"] == list(range(demo_run.steps))
    assert loss["entries"] == [
        step + 2 for step in loss["steps"]
    ]  # after the genesis and data manifest
    assert (loss["total"], loss["downsampled"]) == (demo_run.steps, False)


def test_values_repeat_what_the_signed_entries_record(
    client: TestClient, demo_run: DemoRun
) -> None:
    series = client.get(
        f"/api/v1/runs/{demo_run.run_id}/metrics", params={"key": ["eval_loss", "rank"]}
    ).json()["series"]

    for s in series:
        for entry_index, value in zip(s["entries"], s["values"], strict=True):
            entry = client.get(f"/api/v1/runs/{demo_run.run_id}/entries/{entry_index}").json()
            assert json.loads(entry["body"])["payload"]["metrics"][s["key"]] == value


def test_selected_and_unknown_keys(client: TestClient, demo_run: DemoRun) -> None:
    series = client.get(
        f"/api/v1/runs/{demo_run.run_id}/metrics", params={"key": ["rank", "no_such_metric"]}
    ).json()["series"]

    assert [(s["key"], s["total"]) for s in series] == [
        ("no_such_metric", 0),
        ("rank", demo_run.steps),
    ]


@pytest.mark.parametrize("max_points", [0, 1, 100_001, -3])
def test_max_points_out_of_bounds_is_422(
    client: TestClient, demo_run: DemoRun, max_points: int
) -> None:
    response = client.get(
        f"/api/v1/runs/{demo_run.run_id}/metrics", params={"max_points": max_points}
    )

    assert response.status_code == 422


def test_downsampling_keeps_first_last_and_extremes() -> None:
    values = [math.sin(i / 50) for i in range(10_000)]
    values[1234] = 99.0  # a spike
    values[7777] = -99.0  # a dip
    kept = downsample(list(range(10_000)), values, 200)

    assert len(kept) <= 200
    assert kept[0] == 0 and kept[-1] == 9_999
    assert 1234 in kept and 7777 in kept
    assert kept == sorted(kept)


@pytest.mark.parametrize(
    ("n", "max_points"), [(0, 10), (5, 10), (10, 10), (11, 10), (11, 2), (1000, 3), (1000, 1000)]
)
def test_downsampling_never_exceeds_the_budget_and_keeps_short_series_whole(
    n: int, max_points: int
) -> None:
    rng = random.Random(n)
    values = [rng.random() for _ in range(n)]
    kept = downsample(list(range(n)), values, max_points)

    assert len(kept) <= max_points
    if n <= max_points:
        assert kept == list(range(n))
    else:
        assert kept[0] == 0 and kept[-1] == n - 1
        assert values.index(max(values)) in kept or max_points < 4


def test_a_100_000_step_series_is_served_downsampled_with_its_extremes(tmp_path: Path) -> None:
    """100,000 metric rows in the ledger's metrics table, served through the real query and
    downsampling path. Recording 100,000 outer steps through the ledger would take ~20 min on
    2 cores, so the rows are bulk-inserted for one key of a small recorded run, all pointing
    at its first outer-step entry (the chart path reads only the rows)."""
    run = record_demo_run(
        f"sqlite:///{tmp_path / 'ledger.db'}",
        f"file://{tmp_path / 'objects'}",
        steps=1,
        finish=False,
    )
    rng = random.Random(5)
    values = [
        3.0 * math.exp(-step / 30_000) + rng.uniform(-0.01, 0.01) for step in range(1, 100_001)
    ]
    values[54_321] = 42.0  # a loss spike the chart must show
    engine = create_engine(run.database_url)
    with engine.begin() as conn:
        conn.execute(
            sa.insert(Metric),
            [
                {
                    "run_id": run.run_id,
                    "step": step,
                    "key": "long_loss",
                    "value": value,
                    "entry_index": 2,
                }
                for step, value in enumerate(values, start=1)
            ],
        )
        recorded = conn.execute(
            sa.select(sa.func.count()).select_from(Metric).where(Metric.key == "long_loss")
        ).scalar_one()
    engine.dispose()
    assert recorded == 100_000

    settings = AppSettings(database_url=run.database_url, store_url=run.store_url)
    with TestClient(create_app(settings)) as client:
        response = client.get(
            f"/api/v1/runs/{run.run_id}/metrics", params={"key": "long_loss", "max_points": 1000}
        )

    series = response.json()["series"][0]
    assert series["total"] == 100_000 and series["downsampled"]
    assert len(series["steps"]) <= 1000
    assert series["steps"][0] == 1 and series["steps"][-1] == 100_000
    assert 54_322 in series["steps"]
    assert max(series["values"]) == 42.0
    assert min(series["values"]) == min(values)
