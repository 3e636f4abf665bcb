"""Operations: health, Prometheus metrics, the settings contract, and serving on a port."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from unit.web.web_fixture_run import DemoRun, settings_for

from ledger.db import upgrade
from veritrain.settings import load_settings
from web.app import create_app
from web.server import base_url, serve_in_thread
from web.settings import AppSettings, WebSettings


def samples(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = client.get("/metrics").text
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_healthz_reports_both_back_ends(client: TestClient) -> None:
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "store": "ok"}


def test_healthz_is_503_when_the_database_is_gone(tmp_path: Path) -> None:
    settings = AppSettings(
        database_url=f"sqlite:///{tmp_path / 'missing' / 'ledger.db'}",
        store_url=f"file://{tmp_path / 'o'}",
    )
    with TestClient(create_app(settings)) as client:
        response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json()["database"].startswith("error: no ledger database")
    assert response.json()["store"] == "ok"
    assert not (tmp_path / "missing").exists()  # the read-only app created nothing


def test_a_database_without_the_schema_is_503_with_retry_after(tmp_path: Path) -> None:
    settings = AppSettings(
        database_url=f"sqlite:///{tmp_path / 'empty.db'}", store_url=f"file://{tmp_path / 'o'}"
    )
    with TestClient(create_app(settings)) as client:
        response = client.get("/api/v1/runs")

    assert response.status_code == 503
    assert response.headers["retry-after"] == "30"
    assert "veritrain db upgrade" in response.json()["detail"]


def test_prometheus_counts_requests_by_route_template_and_bytes_served(demo_run: DemoRun) -> None:
    digest = demo_run.checkpoints[1].files["trainer_state.json"]
    with TestClient(create_app(settings_for(demo_run))) as client:
        size = len(client.get(f"/api/v1/objects/{digest}").content)
        client.get(f"/api/v1/objects/{digest}", headers={"Range": "bytes=0-9"})
        client.get("/api/v1/objects/" + "1" * 64)
        client.get("/no/such/page/at/all")
        found = samples(client)

    route = (("route", "/api/v1/objects/{sha256}"),)
    assert (
        found[
            (
                "veritrain_http_requests_total",
                (("method", "GET"), ("route", "/api/v1/objects/{sha256}"), ("status", "200")),
            )
        ]
        == 1
    )
    assert (
        found[
            (
                "veritrain_http_requests_total",
                (("method", "GET"), ("route", "/api/v1/objects/{sha256}"), ("status", "206")),
            )
        ]
        == 1
    )
    assert (
        found[
            (
                "veritrain_http_requests_total",
                (("method", "GET"), ("route", "/api/v1/objects/{sha256}"), ("status", "404")),
            )
        ]
        == 1
    )
    assert found[("veritrain_http_response_body_bytes_total", route)] >= size + 10
    assert (
        found[("veritrain_http_request_duration_seconds_count", (("method", "GET"), *route))] == 3
    )
    assert (
        found[
            (
                "veritrain_http_requests_total",
                (("method", "GET"), ("route", "unmatched"), ("status", "404")),
            )
        ]
        == 1
    )
    assert not any("1111111111" in str(labels) for _, labels in found)


def test_the_cli_settings_class_satisfies_the_web_settings(tmp_path: Path) -> None:
    settings: WebSettings = load_settings(data_dir=tmp_path)
    app = create_app(settings)

    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 503  # no ledger yet: not ready
        upgrade(settings.database_url)
        assert client.get("/healthz").json() == {"status": "ok", "database": "ok", "store": "ok"}


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8000"),
        ("0.0.0.0", "http://127.0.0.1:8000"),
        ("::1", "http://[::1]:8000"),
    ],
)
def test_the_printed_url_is_one_a_person_can_open(host: str, url: str) -> None:
    assert base_url(host, 8000) == url


def test_serve_in_thread_answers_on_a_real_port_and_stops(demo_run: DemoRun) -> None:
    with serve_in_thread(settings_for(demo_run)) as url:
        runs = httpx.get(f"{url}/api/v1/runs").json()["runs"]
        digest = demo_run.checkpoints[0].files["trainer_state.json"]
        body = httpx.get(f"{url}/api/v1/objects/{digest}").content
    assert [r["run_id"] for r in runs] == [demo_run.run_id]
    assert hashlib.sha256(body).hexdigest() == digest
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz")
