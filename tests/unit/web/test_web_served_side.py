"""The served side answers from signed entries and never with a 500 or a store location:
``resolve/main``, the latest step, status and outer-step count follow the signed log even
when the unsigned ``runs`` row is edited; a step is found at its place in the log even when
the database's step column is edited; a huge Range number is 416; a missing object's 404
does not say where the store is; every answer carries ``nosniff``."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from unit.web.web_fixture_run import DemoRun, settings_for

from web.app import create_app


@pytest.fixture
def fresh_client(fresh_run: DemoRun) -> Iterator[TestClient]:
    with TestClient(create_app(settings_for(fresh_run, presign=False))) as client:
        yield client


def _db(run: DemoRun) -> sqlite3.Connection:
    return sqlite3.connect(run.database_url.removeprefix("sqlite:///"))


def test_the_runs_row_cannot_change_what_main_or_the_run_summary_say(
    fresh_run: DemoRun, fresh_client: TestClient
) -> None:
    with _db(fresh_run) as db:
        db.execute("update runs set latest_step = 0, outer_steps = 7, status = 'running'")

    summary = fresh_client.get(f"/api/v1/runs/{fresh_run.run_id}").json()
    resolved = fresh_client.head(f"/{fresh_run.run_id}/resolve/main/model.safetensors.index.json")

    assert (summary["status"], summary["latest_step"], summary["outer_steps"]) == ("finished", 1, 2)
    assert resolved.headers["x-repo-commit"] == fresh_run.checkpoints[1].manifest_root
    listed = fresh_client.get("/").text
    assert "finished" in listed and "running" not in listed


def test_a_step_is_found_at_its_place_in_the_log_whatever_the_step_column_says(
    fresh_run: DemoRun, fresh_client: TestClient
) -> None:
    with _db(fresh_run) as db:  # two rows now claim step 0
        db.execute("drop index uq_entries_outer_step")
        db.execute("update entries set step = 0 where kind = 'outer_step'")

    for step in (0, 1):
        response = fresh_client.get(f"/api/v1/runs/{fresh_run.run_id}/steps/{step}/checkpoint")
        assert response.status_code == 200, response.text
        assert response.json()["manifest_root"] == fresh_run.checkpoints[step].manifest_root


def test_an_entry_that_is_not_its_steps_record_is_a_502_naming_it(
    fresh_run: DemoRun, fresh_client: TestClient
) -> None:
    with _db(fresh_run) as db:  # entry 3 (step 1) now holds step 0's body: the chain is broken
        (body,) = db.execute("select body from entries where idx = 2").fetchone()
        db.execute("update entries set body = ? where idx = 3", (body,))

    response = fresh_client.get(f"/api/v1/runs/{fresh_run.run_id}/steps/1/checkpoint")

    assert response.status_code == 502
    assert "entry 3" in response.json()["detail"] and "outer step 1" in response.json()["detail"]


@pytest.mark.parametrize(
    ("header", "status"),
    [
        ("bytes=" + "9" * 4400 + "-", 416),
        ("bytes=0-" + "9" * 4400, 206),
        ("bytes=-" + "9" * 4400, 206),
    ],
)
def test_a_range_of_thousands_of_digits_is_answered_not_crashed_on(
    client: TestClient, demo_run: DemoRun, header: str, status: int
) -> None:
    digest = demo_run.checkpoints[0].files["trainer_state.json"]
    response = client.get(f"/api/v1/objects/{digest}", headers={"Range": header})

    assert response.status_code == status


def test_a_missing_objects_404_does_not_reveal_where_the_store_is(
    client: TestClient, demo_run: DemoRun
) -> None:
    response = client.get("/api/v1/objects/" + "0" * 64)

    assert response.status_code == 404
    assert response.json() == {"detail": f"no object sha256/{'0' * 64} is stored"}
    store_path = demo_run.store_url.removeprefix("file://")
    assert store_path not in response.text


def test_every_answer_says_nosniff_and_pages_carry_their_policy(
    client: TestClient, demo_run: DemoRun
) -> None:
    api = client.get(f"/api/v1/runs/{demo_run.run_id}")
    page = client.get(f"/runs/{demo_run.run_id}")
    missing = client.get("/api/v1/runs/nope")

    for response in (api, page, missing):
        assert response.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'none'" in page.headers["content-security-policy"]
