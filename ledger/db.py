"""Engines, sessions and schema upgrades for the ledger database (SQLite or PostgreSQL).

Every engine the ledger uses comes from :func:`create_engine`, because append serialisation
depends on how it is configured:

- PostgreSQL runs through psycopg 3 (``postgresql://`` URLs are mapped to
  ``postgresql+psycopg://``). An append locks its run row with ``SELECT ... FOR UPDATE``.
- SQLite gets foreign keys and a busy timeout on every connection. WAL (readers never block
  the writer, the writer never blocks readers) is a property of the database file
  (https://sqlite.org/wal.html#persistence_of_wal_mode), so :func:`upgrade` sets it once, when
  it creates or migrates the file; connections never ask for it. Switching a file into WAL
  needs an exclusive lock, so a reader that asked on connect could wait out the busy timeout
  behind a writer and fail with "database is locked".

  The pysqlite driver's own transaction handling starts transactions late and never for
  SELECTs, so the engine takes over (SQLAlchemy's documented recipe): every transaction
  starts with an explicit ``BEGIN``, and write transactions with ``BEGIN IMMEDIATE``, which
  takes SQLite's single write lock up front. Two appenders therefore queue on the lock
  instead of both reading the same log size.
"""

from __future__ import annotations

import importlib.util
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session

from ledger.errors import SchemaMissingError

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite writer waits for another writer's lock before failing."""

_WRITE_OPTION = "ledger_write"

DATABASE_URL_VARIABLE = "VERITRAIN_DATABASE_URL"
"""The environment variable naming the ledger database: what ``migrations/env.py`` reads when
Alembic is run by hand (``alembic -c migrations/alembic.ini upgrade head``)."""


def database_url(url: str) -> sa.URL:
    """Parse ``url``, mapping plain ``postgresql://`` to the psycopg 3 driver."""
    parsed = sa.make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def display_url(url: str) -> str:
    """``url`` with any password masked, for messages."""
    return database_url(url).render_as_string(hide_password=True)


SQLITE_POOL_SIZE = 48
"""Connections a SQLite engine keeps open (more than the web app's 40 worker threads)."""


def create_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for the ledger at ``url`` (see the module docstring for what is configured)."""
    parsed = database_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        # Keep every connection a busy server opens: the pool's default (5, closing overflow
        # connections as they come back) made 32 concurrent proof requests reopen connections
        # and lose SQLite's per-connection statement cache, recompiling each query. A SQLite
        # connection is a file handle and a little memory.
        kwargs.setdefault("pool_size", SQLITE_POOL_SIZE)
        kwargs.setdefault("max_overflow", SQLITE_POOL_SIZE)
    engine = sa.create_engine(parsed, **kwargs)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_connect)
        event.listen(engine, "begin", _sqlite_begin)
    return engine


def check_engine(engine: Engine) -> None:
    """Refuse a SQLite engine that was not made by :func:`create_engine`: without its
    transaction handling, appends would not be serialised."""
    if engine.dialect.name == "sqlite" and not event.contains(engine, "begin", _sqlite_begin):
        raise ValueError("expected a SQLite engine from ledger.db.create_engine, got a plain one")


def sqlite_file_missing(url: str) -> bool:
    """True when ``url`` names a SQLite file that does not exist yet (connecting would
    silently create an empty one)."""
    parsed = database_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return False
    return not Path(parsed.database).exists()


@contextmanager
def read_session(engine: Engine) -> Iterator[Session]:
    """A session for queries that sees one consistent snapshot for its whole transaction,
    even while appends commit: an audit must never compare entries read before an append
    with a tree head read after it. SQLite gives that to every transaction (WAL); PostgreSQL
    needs REPEATABLE READ (its default, READ COMMITTED, takes a new snapshot per statement)."""
    reader = engine
    if engine.dialect.name == "postgresql":
        reader = engine.execution_options(isolation_level="REPEATABLE READ")
    with _schema_errors(), Session(reader, expire_on_commit=False) as session, session.begin():
        yield session


@contextmanager
def read_connection(engine: Engine) -> Iterator[Connection]:
    """Like :func:`read_session`, for reads made of Core statements only: a plain connection
    in one snapshot transaction, without the ORM session's per-call cost (the proof path)."""
    reader = engine
    if engine.dialect.name == "postgresql":
        reader = engine.execution_options(isolation_level="REPEATABLE READ")
    with _schema_errors(), reader.connect() as connection, connection.begin():
        yield connection


@contextmanager
def write_session(engine: Engine) -> Iterator[Session]:
    """A session whose transaction commits on success and rolls back on any exception, so a
    failed write leaves nothing behind. On SQLite the write lock is taken at ``BEGIN``."""
    writer = engine.execution_options(**{_WRITE_OPTION: True})
    with _schema_errors(), Session(writer, expire_on_commit=False) as session, session.begin():
        yield session


def upgrade(url: str, revision: str = "head") -> str:
    """Run the Alembic migrations on ``url`` up to ``revision``; return the revision the
    database is at afterwards. Creates the folder of a SQLite file if needed."""
    from alembic import command

    parsed = database_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        _sqlite_wal_mode(Path(parsed.database))
    config = alembic_config(url)
    command.upgrade(config, revision)
    engine = create_engine(url)
    try:
        current = current_revision(engine)
    finally:
        engine.dispose()
    assert current is not None  # upgrade just wrote it
    return current


def current_revision(engine: Engine) -> str | None:
    """The Alembic revision the database is at, or None for a database never upgraded."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def schema_state(url: str) -> str:
    """One line on the schema of the database at ``url`` relative to the shipped migrations
    (never creates a SQLite file)."""
    heads = head_revisions()
    if sqlite_file_missing(url):
        return "no ledger database yet; run `veritrain db upgrade`"
    engine = create_engine(url)
    try:
        revision = current_revision(engine)
    finally:
        engine.dispose()
    if revision is None:
        return "no ledger schema yet; run `veritrain db upgrade`"
    if revision in heads:
        return f"schema at revision {revision} (head)"
    return (
        f"schema at revision {revision}, newest is {', '.join(heads)}; run `veritrain db upgrade`"
    )


def head_revisions() -> tuple[str, ...]:
    """The head revision(s) of the migration scripts shipped with the package."""
    from alembic.script import ScriptDirectory

    return tuple(ScriptDirectory.from_config(alembic_config(None)).get_heads())


def alembic_config(url: str | None) -> Any:
    """An Alembic ``Config`` for the ``migrations`` package, built in code so it works from an
    installed package (no alembic.ini in the working directory needed). ``url`` None lets
    ``migrations/env.py`` read it from ``-x database_url=URL`` or :data:`DATABASE_URL_VARIABLE`."""
    from alembic.config import Config

    location = migrations_dir()
    config = Config(str(location / "alembic.ini"))
    config.set_main_option("script_location", str(location))
    if url is not None:
        # Passed as an attribute, not an ini option: ini values are %-interpolated, which
        # would corrupt passwords containing '%'.
        config.attributes["database_url"] = database_url(url).render_as_string(hide_password=False)
    return config


def migrations_dir() -> Path:
    """The folder of the ``migrations`` package (env.py, alembic.ini, versions/).

    Found through the import system, so a wheel install works; the folder must hold env.py
    because an editable install made before the package existed maps it as a namespace
    package with extra, non-folder path entries."""
    spec = importlib.util.find_spec("migrations")
    for entry in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(entry) / "env.py").is_file():
            return Path(entry)
    raise FileNotFoundError("the migrations package (Alembic env.py and versions) is not installed")


def _sqlite_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
    dbapi_connection.isolation_level = None  # we issue BEGIN ourselves (see _sqlite_begin)
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    finally:
        cursor.close()


def _sqlite_wal_mode(path: Path) -> None:
    """Put the SQLite file at ``path`` (created if missing) in WAL mode, unless it already is:
    asking a file already in WAL takes no lock, so a run starting beside readers and writers
    of an existing ledger waits for nobody."""
    connection = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
    try:
        (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
        if str(mode).lower() != "wal":
            (mode,) = connection.execute("PRAGMA journal_mode = WAL").fetchone()
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(
                    f"expected SQLite to put {path} in WAL mode, it stayed in {mode!r}"
                )
    finally:
        connection.close()


def _sqlite_begin(conn: Connection) -> None:
    write = conn.get_execution_options().get(_WRITE_OPTION, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


@contextmanager
def _schema_errors() -> Iterator[None]:
    """Turn "the table does not exist" into :class:`SchemaMissingError`."""
    try:
        yield
    except (sa.exc.OperationalError, sa.exc.ProgrammingError) as exc:
        if _is_missing_table(exc):
            raise SchemaMissingError(
                "the ledger database has no tables yet; run `veritrain db upgrade`"
            ) from exc
        raise


def _is_missing_table(exc: sa.exc.DBAPIError) -> bool:
    orig = exc.orig
    if isinstance(orig, sqlite3.OperationalError):
        return str(orig).startswith("no such table")
    return getattr(orig, "sqlstate", None) == "42P01"  # PostgreSQL undefined_table
