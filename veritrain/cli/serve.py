"""`veritrain serve`: not built yet (issue #6)."""

from __future__ import annotations

import typer

app = typer.Typer(help="not built yet (issue #6)")


def serve() -> None:
    """Not built yet (issue #6)."""
    raise typer.Exit(code=_not_built())


def _not_built() -> int:
    typer.echo("veritrain serve: not built yet (issue #6)", err=True)
    return 3
