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

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer


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
    from trainer.api import run_configuration
    from trainer.config import load_config_file, with_overrides
    from trainer.presets import run_preset
    from veritrain.policy import PolicyChoice
    from veritrain.record.local_run import recorded_config, run_directory_of, train_into_directory
    from veritrain.record.training import (
        ClusterPlacement,
        default_run_id,
        resume_recorded,
        train_recorded,
    )
    from veritrain.settings import load_settings

    settings = load_settings()
    if verification not in ("bitwise", "tolerance"):
        raise typer.BadParameter(
            f"expected 'bitwise' or 'tolerance', got {verification!r}", param_hint="--verification"
        )
    if lighthouse is not None and cluster is None:
        raise typer.BadParameter("--lighthouse URL needs --cluster J: the cluster this host runs")
    placement = (
        ClusterPlacement(cluster=cluster, lighthouse=lighthouse, advertise=advertise)
        if cluster is not None
        else None
    )
    folder_resume = Path(resume) if resume is not None and Path(resume).is_dir() else None
    if resume is not None and folder_resume is None:
        # A run id: the ledger holds its configuration, data and state.
        if (
            config
            or preset
            or any(
                v is not None
                for v in (
                    clusters,
                    stages,
                    data_parallel,
                    outer_steps,
                    inner_steps,
                    method,
                    seed,
                    run_id,
                    text_field,
                    precision,
                )
            )
            or data
            or activation_checkpointing
        ):
            raise typer.BadParameter(
                "--resume RUN_ID continues the run as recorded; drop the other options"
            )
        summary = resume_recorded(
            settings, resume, cluster_keys=key_dir, placement=placement, quiet=quiet
        )
        if summary is not None and not quiet:
            typer.echo(
                f"run {summary.run_id!r}: {summary.steps} outer steps recorded in the ledger"
            )
        return

    if (
        placement is not None
        and placement.cluster != 0
        and config is None
        and preset is None
        and folder_resume is None
    ):
        # A cluster other than the coordinator takes the run's configuration from cluster 0.
        if run_id is None or placement.lighthouse is None:
            raise typer.BadParameter(
                "a cluster joining a run names it and its lighthouse: --run-id ID --lighthouse URL"
            )
        base = run_configuration(placement.lighthouse, run_id)
    elif config is not None:
        base = load_config_file(config)
    elif preset is not None or folder_resume is None:
        base = run_preset(preset or "tiny")
    else:
        base = recorded_config(run_directory_of(folder_resume))
    chosen = with_overrides(
        base,
        clusters=clusters,
        stages=stages,
        data_parallel=data_parallel,
        outer_steps=outer_steps,
        inner_steps=inner_steps,
        data_paths=tuple(str(p) for p in data or ()),
        text_field=text_field,
        run_id=run_id,
        method=method,
        seed=seed,
    )
    if precision is not None:
        chosen = replace(chosen, precision=precision)  # type: ignore[arg-type]  # TrainConfig checks the value
    if activation_checkpointing:
        chosen = replace(chosen, activation_checkpointing=True)
    if workdir is None and folder_resume is None:
        if run_id is None and config is None:
            if placement is not None:
                raise typer.BadParameter(
                    "every cluster of a run on several hosts must name it: pass --run-id"
                )
            chosen = with_overrides(chosen, run_id=default_run_id())
        summary = train_recorded(
            settings,
            chosen,
            policy=PolicyChoice(mode=verification),
            cluster_keys=key_dir,
            placement=placement,
            quiet=quiet,
        )
        if summary is not None and not quiet:
            typer.echo(
                f"run {summary.run_id!r}: {summary.steps} outer steps recorded in the ledger; "
                f"check it with `veritrain verify {summary.run_id}`"
            )
        return
    out = workdir if workdir is not None else run_directory_of(folder_resume)  # type: ignore[arg-type]
    summary = train_into_directory(
        chosen,
        out,
        resume=folder_resume,
        data_dir=settings.data_dir / "corpus",
        placement=placement,
        quiet=quiet,
    )
    if summary is not None and not quiet:
        typer.echo(f"recorded {summary.steps} outer steps of run {summary.run_id!r} in {out}")
