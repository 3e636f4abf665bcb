"""Checkpoint manifests by step, and the Hugging Face ``resolve`` route over them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from unit.web.web_fixture_run import DemoRun, settings_for

from ledger.db import create_engine
from ledger.models import Entry
from storage.checkpoint_files import Manifest
from web.app import create_app

INDEX = "model.safetensors.index.json"


@pytest.mark.parametrize("step", [0, 1, 3])
def test_a_steps_manifest_lists_every_file_with_its_digest_and_size(
    client: TestClient, demo_run: DemoRun, step: int
) -> None:
    response = client.get(f"/api/v1/runs/{demo_run.run_id}/steps/{step}/checkpoint")

    assert response.status_code == 200
    assert response.headers["cache-control"] == "public, max-age=31536000, immutable"
    body = response.json()
    facts = demo_run.checkpoints[step]
    assert (body["manifest_root"], body["manifest_object"]) == (
        facts.manifest_root,
        facts.manifest_object,
    )
    assert {f["name"]: f["digest"] for f in body["files"]} == facts.files
    assert Manifest.from_json(json.dumps(body["manifest"]).encode()).root == facts.manifest_root
    raw = client.get(f"/api/v1/objects/{facts.manifest_object}").content
    assert hashlib.sha256(raw).hexdigest() == facts.manifest_object
    for f in body["files"]:
        downloaded = client.get(f["url"]).content
        assert len(downloaded) == f["size"]
        assert client.get(f["resolve_url"]).content == downloaded


@pytest.mark.parametrize(
    ("path", "status"),
    [("/steps/99/checkpoint", 404), ("/steps/-1/checkpoint", 422), ("/steps/x/checkpoint", 422)],
)
def test_unknown_or_malformed_steps(
    client: TestClient, demo_run: DemoRun, path: str, status: int
) -> None:
    assert client.get(f"/api/v1/runs/{demo_run.run_id}{path}").status_code == status


def test_a_manifest_whose_root_disagrees_with_its_entry_is_a_502(fresh_run: DemoRun) -> None:
    # Point step 1's entry at step 2's manifest object, as a tampered database would.
    engine = create_engine(fresh_run.database_url)
    with engine.begin() as conn:
        body = conn.execute(
            sa.select(Entry.body).where(Entry.run_id == fresh_run.run_id, Entry.step == 0)
        ).scalar_one()
        forged = body.replace(
            fresh_run.checkpoints[0].manifest_object.encode(),
            fresh_run.checkpoints[1].manifest_object.encode(),
        )
        conn.execute(
            sa.update(Entry)
            .where(Entry.run_id == fresh_run.run_id, Entry.step == 0)
            .values(body=forged)
        )
    engine.dispose()

    with TestClient(create_app(settings_for(fresh_run))) as client:
        response = client.get(f"/api/v1/runs/{fresh_run.run_id}/steps/0/checkpoint")

    assert response.status_code == 502
    assert fresh_run.checkpoints[0].manifest_root in response.json()["detail"]


def test_resolve_serves_a_step_file_with_the_hub_headers(
    client: TestClient, demo_run: DemoRun
) -> None:
    facts = demo_run.checkpoints[2]
    response = client.get(f"/{demo_run.run_id}/resolve/step-000002/{INDEX}")

    assert response.status_code == 200
    assert hashlib.sha256(response.content).hexdigest() == facts.files[INDEX]
    assert response.headers["etag"] == f'"{facts.files[INDEX]}"'
    assert response.headers["x-linked-etag"] == f'"{facts.files[INDEX]}"'
    assert response.headers["x-linked-size"] == str(len(response.content))
    assert response.headers["x-repo-commit"] == facts.manifest_root
    assert response.headers["content-disposition"] == f'attachment; filename="{INDEX}"'
    assert response.headers["cache-control"] == "public, max-age=31536000, immutable"


@pytest.mark.parametrize("revision", ["latest", "main", "step-3", "step-000003"])
def test_latest_and_main_name_the_newest_step(
    client: TestClient, demo_run: DemoRun, revision: str
) -> None:
    response = client.head(f"/{demo_run.run_id}/resolve/{revision}/trainer_state.json")

    assert response.status_code == 200
    assert (
        response.headers["x-repo-commit"] == demo_run.checkpoints[demo_run.last_step].manifest_root
    )
    assert response.headers["content-length"] == response.headers["x-linked-size"]
    short = "public, max-age=5"
    assert (response.headers["cache-control"] == short) is (revision in ("latest", "main"))


def test_step_zero_is_the_first_outer_steps_checkpoint(
    client: TestClient, demo_run: DemoRun
) -> None:
    response = client.get(f"/{demo_run.run_id}/resolve/step-000000/trainer_state.json")

    assert json.loads(response.content)["step"] == 0
    assert response.headers["x-repo-commit"] == demo_run.checkpoints[0].manifest_root


def test_resolve_supports_ranges_for_resumed_downloads(
    client: TestClient, demo_run: DemoRun
) -> None:
    name = next(n for n in demo_run.checkpoints[1].files if n.startswith("model-00001"))
    whole = client.get(f"/{demo_run.run_id}/resolve/step-000001/{name}").content
    tail = client.get(
        f"/{demo_run.run_id}/resolve/step-000001/{name}", headers={"Range": "bytes=100-"}
    )

    assert tail.status_code == 206
    assert whole[:100] + tail.content == whole


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/nope/resolve/latest/trainer_state.json", "RepoNotFound"),
        ("/demo-1/resolve/step-000099/trainer_state.json", "RevisionNotFound"),
        ("/demo-1/resolve/v1.0/trainer_state.json", "RevisionNotFound"),
        ("/demo-1/resolve/latest/pytorch_model.bin", "EntryNotFound"),
        ("/demo-1/resolve/latest/sub/dir/trainer_state.json", "EntryNotFound"),
    ],
)
def test_resolve_errors_carry_the_hub_error_codes(client: TestClient, path: str, code: str) -> None:
    for response in (client.get(path), client.head(path)):
        assert response.status_code == 404
        assert response.headers["x-error-code"] == code


def test_a_missing_file_still_names_the_commit_so_clients_can_cache_its_absence(
    client: TestClient, demo_run: DemoRun
) -> None:
    response = client.head(f"/{demo_run.run_id}/resolve/step-000003/missing.bin")

    assert response.headers["x-repo-commit"] == demo_run.checkpoints[3].manifest_root


@pytest.mark.parametrize(
    "path",
    ["/api/v1/runs", "/docs", "/openapi.json", "/static/style.css", "/healthz", "/metrics", "/"],
)
def test_the_resolve_route_shadows_none_of_the_apps_routes(client: TestClient, path: str) -> None:
    response = client.get(path)

    assert response.status_code == 200
    assert "x-repo-commit" not in response.headers


def test_a_run_may_be_called_api_or_docs_without_breaking_anything(tmp_path: Path) -> None:
    from unit.web.web_fixture_run import record_demo_run

    run = record_demo_run(
        f"sqlite:///{tmp_path / 'l.db'}", f"file://{tmp_path / 'o'}", run_id="docs", steps=1
    )
    with TestClient(create_app(settings_for(run))) as client:
        assert client.get("/docs").status_code == 200
        assert "swagger" in client.get("/docs").text.lower()
        resolved = client.get("/docs/resolve/latest/trainer_state.json")
        assert resolved.status_code == 200
        assert resolved.headers["x-repo-commit"] == run.checkpoints[0].manifest_root
