"""`veritrain train`: run a DiLoCoX / DiLoCo / AllReduce training job (DESIGN.md §7).

Spawns clusters x stages processes on this host, or runs as one of them under
``torchrun ... -m veritrain train``. For now every outer step is recorded into a folder
(trainer.local_recorder); the ledger-backed recorder replaces it later.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def train(
    preset: Annotated[str | None, typer.Option(help="Run preset: tiny, small, or a model preset name.")] = None,
    config: Annotated[
        Path | None, typer.Option(help="A JSON or TOML file laid out like TrainConfig.to_dict().")
    ] = None,
    clusters: Annotated[int | None, typer.Option(help="C: clusters (outer replicas).")] = None,
    stages: Annotated[int | None, typer.Option(help="S: pipeline stages per cluster.")] = None,
    outer_steps: Annotated[int | None, typer.Option(help="T: outer steps.")] = None,
    inner_steps: Annotated[int | None, typer.Option(help="H: inner steps per outer step.")] = None,
    data: Annotated[
        list[Path] | None,
        typer.Option(help="Text/.jsonl file or folder (repeatable); default: the Python stdlib sources."),
    ] = None,
    run_id: Annotated[str | None, typer.Option(help="Run name (default: the configuration's, 'run').")] = None,
    method: Annotated[str | None, typer.Option(help="allreduce | diloco | dilocox")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of weights, data order and outer bases.")] = None,
    workdir: Annotated[
        Path | None,
        typer.Option("--workdir", "--out", help="Where steps are recorded (default: $VERITRAIN_DATA_DIR/runs/<run id>)."),
    ] = None,
    resume: Annotated[
        Path | None, typer.Option(help="Continue from a recorded run folder (its latest step) or a step folder.")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or per-step lines.")] = False,
) -> None:
    """Train, printing one line per outer step and recording every step's files."""
    from trainer.config import load_config_file, with_overrides
    from trainer.local_run import recorded_config, run_directory_of, train_into_directory
    from trainer.presets import run_preset
    from veritrain.settings import load_settings

    if config is not None:
        base = load_config_file(config)
    elif preset is not None or resume is None:
        base = run_preset(preset or "tiny")
    else:
        base = recorded_config(run_directory_of(resume))
    chosen = with_overrides(
        base,
        clusters=clusters,
        stages=stages,
        outer_steps=outer_steps,
        inner_steps=inner_steps,
        data_paths=tuple(str(p) for p in data or ()),
        run_id=run_id,
        method=method,
        seed=seed,
    )
    settings = load_settings()
    if workdir is not None:
        out = workdir
    elif resume is not None:
        out = run_directory_of(resume)
    else:
        out = settings.data_dir / "runs" / chosen.run_id
    summary = train_into_directory(chosen, out, resume=resume, data_dir=settings.data_dir / "corpus", quiet=quiet)
    if summary is not None and not quiet:
        typer.echo(f"recorded {summary.steps} outer steps of run {summary.run_id!r} in {out}")
