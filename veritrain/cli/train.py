"""`veritrain train`: run a DiLoCoX / DiLoCo / AllReduce training job (DESIGN.md §7).

Without ``--cluster`` it spawns every cluster on this host (clusters x stages processes) and the
lighthouse they meet at. With ``--cluster J --lighthouse URL`` it runs cluster J only (its
stages' processes, or this one process under ``torchrun ... -m veritrain train``), meeting the
other clusters at a lighthouse started with ``veritrain lighthouse``; cluster 0 records. Every
outer step is recorded in the ledger and the object store of the ``VERITRAIN_*`` settings
(signed, attested); ``--workdir DIR`` records plain files into a folder instead (no ledger, no
signatures: for experiments).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from datetime import datetime

    from ledger.records import RunInfo
    from veritrain.settings import Settings


def train(
    preset: Annotated[
        str | None,
        typer.Option(
            help=(
                "Run preset: tiny, tiny-wide, small, qwen2-12m, qwen2-0.5b, qwen2-1.5b (GPU), "
                "or a model preset name."
            )
        ),
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="A JSON or TOML file laid out like TrainConfig.to_dict().")
    ] = None,
    clusters: Annotated[int | None, typer.Option(help="C: clusters (outer replicas).")] = None,
    stages: Annotated[int | None, typer.Option(help="S: pipeline stages per cluster.")] = None,
    data_parallel: Annotated[
        int | None,
        typer.Option(
            min=1, help="D: data-parallel replicas of each stage (a cluster runs S x D processes)."
        ),
    ] = None,
    outer_steps: Annotated[int | None, typer.Option(help="T: outer steps.")] = None,
    inner_steps: Annotated[int | None, typer.Option(help="H: inner steps per outer step.")] = None,
    data: Annotated[
        list[Path] | None,
        typer.Option(
            help=(
                "Text, .jsonl, .jsonl.gz or .parquet file, or a folder of them (repeatable); "
                "default: the Python stdlib sources."
            )
        ),
    ] = None,
    text_field: Annotated[
        str | None,
        typer.Option(
            help="The JSON Lines field / Parquet column holding the text (default: text)."
        ),
    ] = None,
    run_id: Annotated[
        str | None, typer.Option(help="Run name (default: the configuration's, 'run').")
    ] = None,
    method: Annotated[str | None, typer.Option(help="allreduce | diloco | dilocox")] = None,
    seed: Annotated[
        int | None, typer.Option(help="Seed of weights, data order and outer bases.")
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir", "--out", help="Record plain files into this folder instead of the ledger."
        ),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            help=(
                "Continue a run after its last recorded step: "
                "a run id (ledger) or a --workdir folder."
            )
        ),
    ] = None,
    key_dir: Annotated[
        Path | None,
        typer.Option(
            help=(
                "Where the clusters keep their own keys (created "
                "there; only public keys leave): cluster j uses "
                "DIR/cluster-<j>, or DIR itself with --cluster. "
                "Default: <VERITRAIN_DATA_DIR>/cluster-keys. The "
                "coordinator's keys stay in VERITRAIN_KEY_DIR."
            )
        ),
    ] = None,
    cluster: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Run only this cluster (with --lighthouse); cluster 0 also records to the ledger.",
        ),
    ] = None,
    lighthouse: Annotated[
        str | None,
        typer.Option(
            help="The lighthouse the clusters meet at, http://host:port (`veritrain lighthouse`)."
        ),
    ] = None,
    advertise: Annotated[
        str | None,
        typer.Option(
            help=(
                "This host's address as the other clusters reach "
                "it (default: the one that reaches the lighthouse)."
            )
        ),
    ] = None,
    verification: Annotated[
        str,
        typer.Option(
            help=(
                "The run's verification policy, fixed at genesis: "
                "'bitwise' (re-executions on the recorded hardware "
                "class must match byte for byte; elsewhere the "
                "tolerance applies) or 'tolerance' (everywhere)."
            )
        ),
    ] = "bitwise",
    precision: Annotated[
        str | None,
        typer.Option(
            help=(
                "fp32 (default), bf16 (autocast of the inner steps' "
                "passes) or fp64; recorded in the configuration."
            )
        ),
    ] = None,
    activation_checkpointing: Annotated[
        bool,
        typer.Option(
            "--activation-checkpointing",
            help=(
                "Recompute each decoder layer in the backward pass "
                "(less memory, same bits); recorded in the configuration."
            ),
        ),
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar or per-step lines.")
    ] = False,
) -> None:
    """Train, printing one line per outer step and recording every step."""
    from veritrain.settings import load_settings

    settings = load_settings()
    ledger_resume = resume is not None and workdir is None and not Path(resume).is_dir()
    if resume is not None and ledger_resume and cluster in (None, 0):
        _require_recorded_run(settings, resume)

    from veritrain.errors import LaunchError
    from veritrain.record.launch import (
        ConfigOverrides,
        LaunchRequest,
        decide_launch,
        launch,
        launched_line,
    )

    overrides = ConfigOverrides(
        clusters=clusters,
        stages=stages,
        data_parallel=data_parallel,
        outer_steps=outer_steps,
        inner_steps=inner_steps,
        data=tuple(data or ()),
        text_field=text_field,
        run_id=run_id,
        method=method,
        seed=seed,
        precision=precision,
        activation_checkpointing=activation_checkpointing,
    )
    request = LaunchRequest(
        preset=preset,
        config=config,
        overrides=overrides,
        workdir=workdir,
        resume=resume,
        cluster=cluster,
        lighthouse=lighthouse,
        advertise=advertise,
        verification=verification,
    )
    try:
        plan = decide_launch(request)
    except LaunchError as exc:
        raise typer.BadParameter(str(exc), param_hint=exc.option) from None
    summary = launch(plan, settings, cluster_keys=key_dir, quiet=quiet)
    if summary is not None and not quiet:
        typer.echo(launched_line(plan, summary))


def _require_recorded_run(settings: Settings, run_id: str) -> None:
    """Refuse ``--resume RUN_ID`` for a run the ledger does not hold in a fraction of a second,
    before the trainer's imports (torch: seconds of CPU) are paid for."""
    from sqlalchemy import make_url

    from veritrain.errors import RecorderError, SourceError
    from veritrain.sources import DirectSource

    try:
        source = DirectSource(settings)
    except SourceError as exc:
        raise RecorderError(f"cannot resume {run_id!r}: {exc}") from None
    try:
        runs = [run.run_id for run in sorted(source.ledger.list_runs(), key=_created)]
    finally:
        source.close()
    if run_id not in runs:
        database = make_url(settings.database_url).render_as_string(hide_password=True)
        known = ", ".join(reversed(runs[-5:])) if runs else "none yet"
        raise RecorderError(
            f"cannot resume {run_id!r}: no run {run_id!r} in the ledger at {database} "
            f"(its latest runs: {known})"
        )


def _created(run: RunInfo) -> datetime:
    return run.created_at
