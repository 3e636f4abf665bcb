"""End-to-end fixtures.

Real recorded runs (the multi-process trainer into a real ledger and store):

- ``recorded_run`` (session): a tiny 2x2 run recorded once (SQLite + local objects); do not
  modify it. ``fresh_run``: a private copy of it, for tampering.

Both recordings are made once per ``pytest`` session, also when xdist runs several workers
(:func:`built_once.built_once`): every worker reads the same files.

The web app served on a real port (uvicorn in a background thread), reusable by any e2e test
(``veritrain verify --api`` tests among them):

- ``served_demo`` (session): the run recorded by ``unit.web.web_fixture_run`` into a SQLite
  ledger and a local store (the web unit tests' ``demo_run``), served; yields
  :class:`ServedRun` (``url``, ``run``).
- ``serve_app``: a function ``serve_app(settings) -> base URL`` that serves any ledger and
  store (anything with ``database_url``, ``store_url``, ``origin``, ``s3_presign_downloads``,
  e.g. ``veritrain.settings.Settings``) until the test ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from e2e.recorded_runs import copy_run, shared_recorded_run
from unit.web.web_fixture_run import ServedRun, record_demo_run_once

from veritrain.settings import Settings
from web.server import serve_in_thread
from web.settings import AppSettings, WebSettings


@pytest.fixture(scope="session")
def recorded_run(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return shared_recorded_run(tmp_path_factory)


@pytest.fixture
def fresh_run(recorded_run: Settings, tmp_path: Path) -> Settings:
    return copy_run(recorded_run, tmp_path / "veritrain-data")


@pytest.fixture
def serve_app() -> Iterator[Callable[[WebSettings], str]]:
    with ExitStack() as stack:
        yield lambda settings: stack.enter_context(serve_in_thread(settings))


@pytest.fixture(scope="session")
def served_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedRun]:
    run = record_demo_run_once(tmp_path_factory)
    settings = AppSettings(
        database_url=run.database_url, store_url=run.store_url, origin=run.origin
    )
    with serve_in_thread(settings) as url:
        yield ServedRun(url=url, run=run)
