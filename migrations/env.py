"""Alembic environment for the ledger schema.

The database URL comes, in order, from ``config.attributes["database_url"]`` (set by
:func:`ledger.db.upgrade`, which ``veritrain db upgrade`` calls with the settings' URL), the
``sqlalchemy.url`` ini option, ``-x database_url=URL`` on Alembic's command line, or the
``VERITRAIN_DATABASE_URL`` environment variable. Like everything below the composition root
(DESIGN.md §1), it imports ledger/ only, never ``veritrain``. SQLite runs in batch mode
(``render_as_batch``): it cannot ALTER most of a table in place, so Alembic rebuilds the table
instead.
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from alembic import context
from sqlalchemy.pool import NullPool

from ledger.db import DATABASE_URL_VARIABLE, database_url
from ledger.models import Base

config = context.config
target_metadata = Base.metadata

_UPGRADE_LOCK = 0x7665726974726169  # "veritrai": the PostgreSQL advisory lock key of upgrades


def _url() -> str:
    url = (
        config.attributes.get("database_url")
        or config.get_main_option("sqlalchemy.url")
        or context.get_x_argument(as_dictionary=True).get("database_url")
        or os.environ.get(DATABASE_URL_VARIABLE)
    )
    if not url:
        raise RuntimeError(
            f"no ledger database to migrate: expected {DATABASE_URL_VARIABLE} or "
            "-x database_url=URL, got neither (`veritrain db upgrade` applies the defaults)"
        )
    return database_url(str(url)).render_as_string(hide_password=False)


def _configure(**kwargs: object) -> None:
    url = _url()
    context.configure(
        target_metadata=target_metadata,
        render_as_batch=sa.make_url(url).get_backend_name() == "sqlite",
        compare_type=True,
        **kwargs,  # type: ignore[arg-type]
    )


def run_migrations_offline() -> None:
    """Write the SQL to stdout instead of running it (``alembic upgrade head --sql``)."""
    _configure(url=_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    # A plain engine, not ledger.db.create_engine: migrations run with SQLite's foreign-key
    # enforcement off (its default), as batch-mode table rebuilds require.
    engine = sa.create_engine(_url(), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            _configure(connection=connection)
            with context.begin_transaction():
                if connection.dialect.name == "postgresql":
                    # Processes upgrading at the same moment (several workers starting) queue
                    # here; each then reads the revision the previous one committed.
                    connection.execute(
                        sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _UPGRADE_LOCK}
                    )
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
