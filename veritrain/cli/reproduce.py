"""`veritrain reproduce [RUN_ID] --step T [--cluster J] [--api URL]`: re-execute one outer
step and compare digests with the ledger; exit 0 only on a match."""

from __future__ import annotations

import json
from typing import Annotated

import typer


def reproduce(
    run_id: Annotated[str | None, typer.Argument(help="The run (default: the most recent one).")] = None,
    step: Annotated[int, typer.Option(help="The outer step T to re-execute.")] = ...,  # type: ignore[assignment]
    cluster: Annotated[
        int | None, typer.Option(help="Re-run only cluster J's H inner steps and compare its contribution digests.")
    ] = None,
    api: Annotated[str | None, typer.Option(help="Read the run from the public HTTP API at this URL.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Download the state before step T and its data, re-execute T, compare with the ledger."""
    from veritrain.reproduce import reproduce_step
    from veritrain.sources import open_source

    with open_source(api) as source:
        comparison = reproduce_step(source, run_id, step, cluster)
    typer.echo(json.dumps(comparison.to_json(), indent=2) if as_json else comparison.render())
    raise typer.Exit(code=0 if comparison.ok else 1)
