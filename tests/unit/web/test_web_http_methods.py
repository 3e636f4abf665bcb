"""HEAD and 405 over every route of the app (RFC 9110 §9.3.2 and §15.5.6).

The routes are read from the app itself, so a route added later without an example path
fails here until it gets one: every GET route must answer HEAD with the GET's status and
headers and no body, and every method a route does not answer gets a 405 whose ``Allow``
names exactly the methods that work."""

from __future__ import annotations

import pytest
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from unit.web.web_fixture_run import DemoRun

from web.revisions import revision_name
from web.vendor import plotly_bundle

READ_ONLY = "GET, HEAD"
VOLATILE = {"date", "server-timing"}
"""Headers that may differ between two answers to the same request."""
LIVE = {"/metrics"}
"""Routes whose content changes from one request to the next (the counters count the GET)."""


def example_paths(run: DemoRun, client: TestClient) -> dict[str, str]:
    """A path that answers 200 for each route of the app, by the route's path format."""
    size = client.get(f"/api/v1/runs/{run.run_id}").json()["size"]
    checkpoint = run.checkpoints[run.last_step]
    r = f"/api/v1/runs/{run.run_id}"
    return {
        "/openapi.json": "/openapi.json",
        "/docs": "/docs",
        "/docs/oauth2-redirect": "/docs/oauth2-redirect",
        "/api/v1/runs": "/api/v1/runs",
        "/api/v1/runs/{run}": r,
        "/api/v1/runs/{run}/entries": f"{r}/entries",
        "/api/v1/runs/{run}/entries/{index}": f"{r}/entries/0",
        "/api/v1/runs/{run}/entries/{index}/receipt": f"{r}/entries/0/receipt",
        "/api/v1/runs/{run}/log/checkpoint": f"{r}/log/checkpoint",
        "/api/v1/runs/{run}/log/proof/inclusion": f"{r}/log/proof/inclusion?index=0",
        "/api/v1/runs/{run}/log/proof/consistency": f"{r}/log/proof/consistency?old=1",
        "/api/v1/runs/{run}/tlog/checkpoint": f"{r}/tlog/checkpoint",
        "/api/v1/runs/{run}/tlog/tile/{path}": f"{r}/tlog/tile/0/000.p/{size}",
        "/api/v1/runs/{run}/metrics": f"{r}/metrics",
        "/api/v1/runs/{run}/steps/{t}/checkpoint": f"{r}/steps/0/checkpoint",
        "/api/v1/objects/{sha256}": f"/api/v1/objects/{run.data_manifest_object}",
        "/healthz": "/healthz",
        "/metrics": "/metrics",
        "/static/vendor/{name}": f"/static/vendor/{plotly_bundle().name}",
        "/": "/",
        "/runs/{run}": f"/runs/{run.run_id}",
        "/static/{path}": "/static/style.css",
        "/{run}/resolve/{revision}/{filename}": (
            f"/{run.run_id}/resolve/{revision_name(checkpoint.step)}/{min(checkpoint.files)}"
        ),
        "/api/models/{run}/revision/{revision}": f"/api/models/{run.run_id}/revision/main",
        "/api/models/{run}/tree/{revision}": f"/api/models/{run.run_id}/tree/main",
        "/api/models/{run}/refs": f"/api/models/{run.run_id}/refs",
    }


@pytest.fixture(scope="module")
def routes(client: TestClient, demo_run: DemoRun) -> dict[str, str]:
    """Every route of the app (by path format) -> an example path that answers 200."""
    examples = example_paths(demo_run, client)
    formats = {route.path_format for route in iter_route_contexts(client.app.routes)}  # type: ignore[attr-defined]
    missing = sorted(formats - examples.keys())
    assert missing == [], f"routes without an example path here: {missing}"
    return {path_format: examples[path_format] for path_format in sorted(formats)}


def test_every_get_route_answers_head_with_the_gets_headers_and_no_body(
    client: TestClient, routes: dict[str, str]
) -> None:
    for path_format, path in routes.items():
        get = client.get(path, follow_redirects=False)
        head = client.head(path, follow_redirects=False)
        assert get.status_code == 200, (path_format, get.status_code, get.text[:200])
        assert head.status_code == 200, (path_format, head.status_code)
        assert head.content == b"", path_format
        volatile = VOLATILE | ({"content-length"} if path_format in LIVE else set())
        got = {k: v for k, v in head.headers.items() if k not in volatile}
        expected = {k: v for k, v in get.headers.items() if k not in volatile}
        assert got == expected, path_format


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_every_405_names_the_methods_that_work(
    client: TestClient, routes: dict[str, str], method: str
) -> None:
    for path_format, path in routes.items():
        answer = client.request(method, path, follow_redirects=False)
        assert answer.status_code == 405, (path_format, answer.status_code)
        assert answer.headers.get("allow") == READ_ONLY, path_format


def test_the_object_and_resolve_routes_no_longer_say_head_only(
    client: TestClient, demo_run: DemoRun
) -> None:
    # Each is declared twice (GET and HEAD); the 405 named only the first one's method.
    step = revision_name(demo_run.last_step)
    filename = min(demo_run.checkpoints[demo_run.last_step].files)
    for path in (
        f"/api/v1/objects/{demo_run.data_manifest_object}",
        f"/{demo_run.run_id}/resolve/{step}/{filename}",
    ):
        answer = client.post(path)
        assert (answer.status_code, answer.headers["allow"]) == (405, READ_ONLY)
        assert client.get(path).status_code == 200
