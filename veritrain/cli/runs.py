"""`veritrain runs`: list the runs in the ledger with their steps and status."""

from __future__ import annotations

import typer


def runs() -> None:
    """List runs (newest first) with id, outer steps, entries and status."""
    from ledger.db import display_url
    from ledger.errors import SchemaMissingError
    from ledger.service import read_runs
    from veritrain.settings import load_settings

    url = load_settings().database_url
    try:
        found = read_runs(url)
    except SchemaMissingError:
        typer.echo(
            f"No ledger at {display_url(url)} yet: nothing has been recorded. "
            "Run `veritrain demo` or `veritrain train` to record a run."
        )
        return
    if not found:
        typer.echo(f"The ledger at {display_url(url)} has no runs yet.")
        return
    width = max(len("RUN"), *(len(r.run_id) for r in found))
    typer.echo(f"{'RUN':<{width}}  {'STEPS':>6}  {'ENTRIES':>7}  {'STATUS':<8}  CREATED (UTC)")
    for r in found:
        created = r.created_at.strftime("%Y-%m-%d %H:%M:%S")
        typer.echo(
            f"{r.run_id:<{width}}  {r.outer_steps:>6}  {r.size:>7}  {r.status:<8}  {created}"
        )
