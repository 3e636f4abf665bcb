"""`veritrain train`: not built yet (issue #4)."""

from __future__ import annotations

import typer

app = typer.Typer(help="not built yet (issue #4)")


def train() -> None:
    """Not built yet (issue #4)."""
    raise typer.Exit(code=_not_built())


def _not_built() -> int:
    typer.echo("veritrain train: not built yet (issue #4)", err=True)
    return 3
