"""`veritrain cluster-keys RUN_ID --key-dir DIR`: what a cluster's operator checks against a
run's genesis -- the verifier keys its own folder holds, and their fingerprint.

The run's page and ``veritrain verify --json`` show the fingerprint of the keys the genesis
enrols for each cluster; equal fingerprints mean the coordinator enrolled this cluster's own
keys, not keys of its making (docs/auditing.md, "What remains trusted").
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def cluster_keys(
    run_id: Annotated[str, typer.Argument(help="The run the keys were created for.")],
    key_dir: Annotated[
        Path,
        typer.Option(
            help="The cluster's own key folder (`veritrain train --cluster J --key-dir DIR`; "
            "in a one-host run, <VERITRAIN_DATA_DIR>/cluster-keys/cluster-<J>)."
        ),
    ],
) -> None:
    """Print the cluster's verifier keys for RUN_ID and their fingerprint (read only; no key
    is created)."""
    from attestation.enrolment import cluster_fingerprint
    from veritrain.cluster_identity import ClusterKeyFolder

    try:
        held = ClusterKeyFolder(root=key_dir, origin="").held_keys(run_id)
    except FileNotFoundError as exc:
        raise typer.BadParameter(
            f"no key for run {run_id!r} in {key_dir}: {exc.filename}", param_hint="--key-dir"
        ) from None
    for role, vkey in held.items():
        typer.echo(f"{role:<14} {vkey}")
    typer.echo(f"{'fingerprint':<14} {cluster_fingerprint(**held)}")
