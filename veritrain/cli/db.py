"""`veritrain db`: create or upgrade the ledger schema (Alembic, `migrations/`)."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(help="Create or upgrade the ledger database schema.", no_args_is_help=True)

_URL_HELP = "Database URL; default VERITRAIN_DATABASE_URL."


@app.callback()
def _group() -> None:
    """Create or upgrade the ledger database schema."""


@app.command("upgrade")
def upgrade(url: Annotated[str | None, typer.Option(help=_URL_HELP)] = None) -> None:
    """Apply every migration up to the newest (alembic upgrade head)."""
    from ledger.db import display_url
    from ledger.db import upgrade as upgrade_schema

    target = url or _settings_url()
    revision = upgrade_schema(target)
    typer.echo(f"ledger schema at revision {revision} (head) on {display_url(target)}")


@app.command("current")
def current(url: Annotated[str | None, typer.Option(help=_URL_HELP)] = None) -> None:
    """Show the schema revision of the database and whether it is the newest."""
    from ledger.db import display_url, schema_state

    target = url or _settings_url()
    typer.echo(f"{display_url(target)}: {schema_state(target)}")


def _settings_url() -> str:
    from veritrain.settings import load_settings

    return load_settings().database_url
