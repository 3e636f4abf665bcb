"""`veritrain reproduce [RUN_ID] --step T [--cluster J] [--api URL] [--bisect] [--precision P]
[--threads N] [--device D] [--mode auto|bitwise|tolerance]`: re-execute one outer step and
compare it with the ledger; exit 0 only on a match."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from veritrain.cli.audit_mode import ModeOption, checked_mode


def reproduce(
    run_id: Annotated[
        str | None, typer.Argument(help="The run (default: the most recent one).")
    ] = None,
    step: Annotated[int, typer.Option(help="The outer step T to re-execute.")] = ...,  # type: ignore[assignment]
    cluster: Annotated[
        int | None,
        typer.Option(
            help="Re-run only cluster J's H inner steps and judge its contribution and commitments."
        ),
    ] = None,
    api: Annotated[
        str | None, typer.Option(help="Read the run from the public HTTP API at this URL.")
    ] = None,
    bisect: Annotated[
        bool,
        typer.Option(
            "--bisect", help="Report the first inner step whose commitment disagrees, and the cost."
        ),
    ] = False,
    precision: Annotated[
        str | None,
        typer.Option(
            help="Re-execute at this precision (fp32, bf16, fp64) instead of the recorded one."
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(min=1, help="Re-execute with this many intra-op threads per process."),
    ] = None,
    device: Annotated[
        str | None,
        typer.Option(
            help="Re-execute on this device (cpu or cuda) instead of the recorded choice."
        ),
    ] = None,
    mode: ModeOption = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Download what step T needs, re-execute it, compare with the ledger."""
    from trainer.errors import ConfigError
    from trainer.execution import Execution
    from veritrain.audit.reproduce import reproduce_step
    from veritrain.sources import open_source

    chosen = checked_mode(mode)
    chosen_precision: Any = precision  # Execution checks the values
    chosen_device: Any = device
    try:
        execution = (
            Execution(precision=chosen_precision, threads=threads, device=chosen_device)
            if precision or threads or device
            else None
        )
    except ConfigError as exc:
        raise typer.BadParameter(
            str(exc), param_hint="--precision / --threads / --device"
        ) from None
    with open_source(api) as source:
        comparison = reproduce_step(
            source, run_id, step, cluster, execution=execution, mode=chosen, bisect=bisect
        )
    typer.echo(json.dumps(comparison.to_json(), indent=2) if as_json else comparison.render())
    raise typer.Exit(code=0 if comparison.ok else 1)
