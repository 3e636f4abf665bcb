"""`veritrain bench`: not built yet (issue #7)."""

from __future__ import annotations

import typer

app = typer.Typer(help="not built yet (issue #7)")


def bench() -> None:
    """Not built yet (issue #7)."""
    raise typer.Exit(code=_not_built())


def _not_built() -> int:
    typer.echo("veritrain bench: not built yet (issue #7)", err=True)
    return 3
