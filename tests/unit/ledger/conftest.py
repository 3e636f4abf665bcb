"""Fixtures for the ledger unit tests: a real SQLite ledger (migrated with Alembic) and
in-memory log keys."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from unit.ledger.ledger_helpers import ORIGIN, StepClock

from ledger.db import create_engine, upgrade
from ledger.keyring import InMemoryLogKeys
from ledger.service import Ledger


@pytest.fixture
def log_keys() -> InMemoryLogKeys:
    return InMemoryLogKeys()


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file upgraded to head once per session; tests get copies (a migration takes
    ~0.2 s, a copy ~nothing)."""
    path = tmp_path_factory.mktemp("template") / "ledger.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def engine(migrated_template: Path, tmp_path: Path) -> Iterator[Engine]:
    path = tmp_path / "migrated.db"
    shutil.copyfile(migrated_template, path)
    engine = create_engine(f"sqlite:///{path}")
    yield engine
    engine.dispose()


@pytest.fixture
def ledger(engine: Engine, log_keys: InMemoryLogKeys) -> Ledger:
    return Ledger(engine, origin=ORIGIN, log_keys=log_keys, clock=StepClock())
