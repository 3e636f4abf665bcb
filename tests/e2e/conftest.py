from __future__ import annotations

from pathlib import Path

import pytest
from e2e.recorded_runs import copy_run, record_small_run

from veritrain.settings import Settings


@pytest.fixture(scope="session")
def recorded_run(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """One real recorded run (SQLite + local objects), trained once per session. Do not
    modify it: take ``fresh_run`` to tamper."""
    return record_small_run(tmp_path_factory.mktemp("recorded") / "veritrain-data")


@pytest.fixture
def fresh_run(recorded_run: Settings, tmp_path: Path) -> Settings:
    """A private copy of ``recorded_run``."""
    return copy_run(recorded_run, tmp_path / "veritrain-data")
