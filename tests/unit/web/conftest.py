"""Fixtures of the web unit tests: one recorded run (SQLite + local store) shared by the
session, and the app over it. The app only reads, so tests can share it; tests that alter
data record their own run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from unit.web.web_fixture_run import DemoRun, record_demo_run, record_demo_run_once, settings_for

from web.app import create_app


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    return record_demo_run_once(tmp_path_factory)


@pytest.fixture(scope="session")
def client(demo_run: DemoRun) -> Iterator[TestClient]:
    with TestClient(create_app(settings_for(demo_run))) as test_client:
        yield test_client


@pytest.fixture
def fresh_run(tmp_path: Path) -> DemoRun:
    """A run of this test's own, which the test may alter."""
    return record_demo_run(
        f"sqlite:///{tmp_path / 'ledger.db'}", f"file://{tmp_path / 'objects'}", steps=2
    )
