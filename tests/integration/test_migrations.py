"""The Alembic migrations: one head, and upgrading an empty database to it gives exactly the
schema of ledger/models.py, on SQLite and on PostgreSQL."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from ledger.db import (
    alembic_config,
    create_engine,
    current_revision,
    head_revisions,
    migrations_dir,
    upgrade,
)
from ledger.models import Base

TABLES = {
    "runs",
    "entries",
    "tree_nodes",
    "tree_heads",
    "enrolled_keys",
    "metrics",
    "cosignatures",
    "witness_checkpoints",
}


def test_there_is_exactly_one_head() -> None:
    script = ScriptDirectory.from_config(alembic_config(None))
    assert len(script.get_heads()) == 1
    assert head_revisions() == tuple(script.get_heads())
    # Every revision chains back to the first one: no branches, no orphans.
    revisions = list(script.walk_revisions())
    assert [r.down_revision for r in revisions].count(None) == 1


def _assert_schema_matches_models(url: str) -> None:
    engine = create_engine(url)
    try:
        assert current_revision(engine) == head_revisions()[0]
        assert set(sa.inspect(engine).get_table_names()) >= TABLES
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_upgrade_to_head_creates_the_models_schema(
    backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "postgres_url")
    assert upgrade(url) == head_revisions()[0]
    _assert_schema_matches_models(url)
    assert upgrade(url) == head_revisions()[0]  # a second upgrade is a no-op


def test_concurrent_upgrades_on_postgresql_all_succeed(postgres_url: str) -> None:
    # Several processes starting at once (each recorder calls upgrade) must not race on DDL.
    # Processes, not threads: Alembic keeps its migration context in module globals.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(3, mp_context=context) as pool:
        revisions = list(pool.map(upgrade, [postgres_url] * 3))
    assert revisions == [head_revisions()[0]] * 3
    _assert_schema_matches_models(postgres_url)


def test_plain_postgresql_urls_use_psycopg_3(postgres_url: str) -> None:
    plain = (
        sa.make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False)
    )
    upgrade(plain)
    engine = create_engine(plain)
    try:
        assert engine.dialect.driver == "psycopg"
    finally:
        engine.dispose()
    _assert_schema_matches_models(postgres_url)


def test_downgrade_to_base_and_back(sqlite_url: str) -> None:
    from alembic import command

    upgrade(sqlite_url)
    command.downgrade(alembic_config(sqlite_url), "base")
    engine = create_engine(sqlite_url)
    try:
        assert current_revision(engine) is None
        assert not TABLES & set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()
    upgrade(sqlite_url)
    _assert_schema_matches_models(sqlite_url)


_BY_HAND = """
import sys
from alembic.config import main
main(argv=sys.argv[1:])
print(sorted(m for m in sys.modules if m.split(".")[0] == "veritrain"))
"""
"""``alembic ARGS`` in a fresh interpreter, then the veritrain modules it imported."""


def _alembic_by_hand(
    tmp_path: Path, *args: str, database_url: str | None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERITRAIN_")}
    if database_url is not None:
        env["VERITRAIN_DATABASE_URL"] = database_url
    ini = str(migrations_dir() / "alembic.ini")
    return subprocess.run(
        [sys.executable, "-c", _BY_HAND, "-c", ini, *args, "upgrade", "head"],
        cwd=tmp_path,  # a stray default database would land here
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("named_by", ["environment", "x-argument"])
def test_alembic_run_by_hand_migrates_the_named_database_without_the_composition_root(
    tmp_path: Path, named_by: str
) -> None:
    url = f"sqlite:///{tmp_path / 'by-hand.db'}"
    if named_by == "environment":
        done = _alembic_by_hand(tmp_path, database_url=url)
    else:
        done = _alembic_by_hand(tmp_path, "-x", f"database_url={url}", database_url=None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"  # migrations/ never imports veritrain
    _assert_schema_matches_models(url)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["by-hand.db"]


def test_alembic_run_by_hand_without_a_database_url_says_what_to_set(tmp_path: Path) -> None:
    done = _alembic_by_hand(tmp_path, database_url=None)
    assert done.returncode != 0
    assert (
        "no ledger database to migrate: expected VERITRAIN_DATABASE_URL or -x database_url=URL, "
        "got neither (`veritrain db upgrade` applies the defaults)"
    ) in done.stderr
    assert list(tmp_path.iterdir()) == []
