"""`veritrain verify [RUN_ID] [--api URL] [--json] [--deep]`: re-check a whole run.

Exit 0 only if every check passes; each failure names the entry index and the outer step.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer


def verify(
    run_id: Annotated[
        str | None, typer.Argument(help="The run (default: the most recent one).")
    ] = None,
    api: Annotated[
        str | None,
        typer.Option(
            help="Verify from the public HTTP API at this URL alone (no database access)."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as one JSON object.")
    ] = False,
    deep: Annotated[
        bool,
        typer.Option(help="Re-hash every checkpoint file and data shard, however large the run."),
    ] = False,
    vkey: Annotated[
        str | None,
        typer.Option(
            help="Pin the run's log key (C2SP verifier key) instead of trusting the genesis."
        ),
    ] = None,
    no_witness: Annotated[
        bool,
        typer.Option(
            "--no-memory",
            "--no-witness",
            help="Neither read nor update the record of tree heads seen before.",
        ),
    ] = False,
    witness: Annotated[
        list[str] | None,
        typer.Option(
            help="A witness's C2SP verifier key (type 0x04), repeatable: require its "
            "cosignature. VKEY@URL also asks the witness at URL what it holds now, and fails "
            "on a log rolled back to a head it once cosigned."
        ),
    ] = None,
    quorum: Annotated[
        int | None,
        typer.Option(
            help="How many of the --witness keys must have cosigned (default: all of them)."
        ),
    ] = None,
    cluster_key: Annotated[
        list[str] | None,
        typer.Option(
            help="J=VKEY, repeatable: a key of cluster J learned from its operator; fail unless "
            "the genesis enrols exactly that key for cluster J."
        ),
    ] = None,
) -> None:
    """Re-check a run: tree head, hash chain, proofs, statements, quotes, contributions,
    checkpoints, data and metrics."""
    from veritrain.audit.verify import verify_run
    from veritrain.audit.verify.cluster_key_checks import parse_cluster_key
    from veritrain.audit.verify.seen_heads import SeenHeads
    from veritrain.sources import open_source

    try:
        pinned = [parse_cluster_key(item) for item in cluster_key or ()]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--cluster-key") from None
    with open_source(api) as source:
        report = verify_run(
            source,
            run_id,
            deep=deep,
            vkey=vkey,
            seen_heads=None if no_witness else SeenHeads(),
            witnesses=tuple(witness or ()),
            quorum=quorum,
            cluster_keys=pinned,
        )
    typer.echo(json.dumps(report.to_json(), indent=2) if as_json else report.render())
    raise typer.Exit(code=0 if report.ok else 1)
