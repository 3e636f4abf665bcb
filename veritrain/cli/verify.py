"""`veritrain verify`: not built yet (issue #5)."""

from __future__ import annotations

import typer

app = typer.Typer(help="not built yet (issue #5)")


def verify() -> None:
    """Not built yet (issue #5)."""
    raise typer.Exit(code=_not_built())


def _not_built() -> int:
    typer.echo("veritrain verify: not built yet (issue #5)", err=True)
    return 3
