"""`veritrain db`: not built yet (issue #2)."""

from __future__ import annotations

import typer

app = typer.Typer(help="not built yet (issue #2)")


def db() -> None:
    """Not built yet (issue #2)."""
    raise typer.Exit(code=_not_built())


def _not_built() -> int:
    typer.echo("veritrain db: not built yet (issue #2)", err=True)
    return 3
