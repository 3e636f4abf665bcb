"""`veritrain audit [RUN_ID] --sample K [--seed S] [--api URL] [--mode auto|bitwise|tolerance]
[--json]`: re-execute K (outer step, cluster) pairs drawn at random and report the probability of
catching a lazy cluster (veritrain/audit/spot_check.py); exit 0 only if every pair matches."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from veritrain.cli.audit_mode import ModeOption, checked_mode


def audit(
    run_id: Annotated[
        str | None, typer.Argument(help="The run (default: the most recent one).")
    ] = None,
    sample: Annotated[
        int,
        typer.Option(min=1, help="How many (outer step, cluster) pairs to re-execute."),
    ] = 3,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Draw with this seed (repeatable; whoever knows it knows the draw). "
            "Default: this machine's own randomness."
        ),
    ] = None,
    api: Annotated[
        str | None, typer.Option(help="Read the run from the public HTTP API at this URL.")
    ] = None,
    mode: ModeOption = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Spot-check a run: re-execute a random sample of clusters' contributions."""
    from veritrain.audit.spot_check import spot_check
    from veritrain.sources import open_source

    chosen = checked_mode(mode)
    say = None if as_json else (lambda line: typer.echo(line, err=True))
    with open_source(api) as source:
        check = spot_check(source, run_id, sample, seed=seed, mode=chosen, say=say)
    typer.echo(json.dumps(check.to_json(), indent=2) if as_json else check.render())
    raise typer.Exit(code=0 if check.ok else 1)
