"""Property-based requests generated from the OpenAPI document (schemathesis) against the
app over a recorded run: no request may produce a server error, and every answer must
match what the document says (status codes, content types, headers, JSON schemas).

One test per operation. (schemathesis' ``from_fixture`` loader does not run under pytest 9,
so each test loads the schema from the session's app and drives the operation's hypothesis
strategy itself.) Random run ids and digests only ever reach the 404 paths, so half of the
cases are anchored to the recorded run and one of its objects, with every other part of
the request (indices, sizes, query parameters, headers) still generated."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.specs.openapi.checks import positive_data_acceptance
from unit.web.web_fixture_run import DemoRun

from web.app import create_app
from web.settings import AppSettings

EXAMPLES = 50
"""Generated requests per operation; 16 operations take about 10 s."""


def _operations() -> list[tuple[str, str]]:
    # The document does not depend on the data, so an app that is never started lists them.
    document = create_app(
        AppSettings(database_url="sqlite://", store_url="file:///nonexistent")
    ).openapi()
    return [(method.upper(), path) for path, item in document["paths"].items() for method in item]


@pytest.fixture(scope="module")
def web_schema(client: TestClient) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", client.app)


@pytest.mark.parametrize(("method", "path"), _operations())
def test_no_generated_request_breaks_the_api(
    web_schema: Any, demo_run: DemoRun, method: str, path: str
) -> None:
    operation = web_schema[path][method]
    known = {"run": demo_run.run_id, "sha256": demo_run.checkpoints[1].manifest_object}

    def anchored(case: Any) -> Any:
        for name, value in known.items():
            if case.path_parameters and name in case.path_parameters:
                case.path_parameters[name] = value
        return case

    strategy = operation.as_strategy()

    @given(case=st.one_of(strategy, strategy.map(anchored)))
    @settings(
        max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    def check(case: Any) -> None:
        # Every default check but one: parameters that are valid alone but not together
        # (an index at or past a given size, old > new) are 400 by the API's contract
        # (docs/web.md), which schemathesis' positive-data check would call a rejection.
        case.call_and_validate(excluded_checks=[positive_data_acceptance])

    check()
