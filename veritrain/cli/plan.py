"""``veritrain plan``: memory per GPU and communication per outer step for a topology.

Parses the options and calls ``trainer.planner.plan``; see that module for the arithmetic
and docs/benchmarks.md for how it compares with the DiLoCoX paper's setting.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer


def plan(
    preset: Annotated[
        str, typer.Option(help="Model preset (trainer/presets.py).")
    ] = "qwen1.5-107b",
    clusters: Annotated[int, typer.Option(min=1, help="C: clusters joined by the slow link.")] = 2,
    stages: Annotated[int, typer.Option(min=1, help="S: pipeline stages per cluster.")] = 8,
    data_parallel: Annotated[
        int, typer.Option(min=1, help="D: replicas of each stage inside a cluster.")
    ] = 2,
    gpu_memory: Annotated[float, typer.Option(min=1.0, help="GB of memory per GPU.")] = 80.0,
    bandwidth: Annotated[
        float, typer.Option(min=0.001, help="Link between clusters, Mbit/s.")
    ] = 1000.0,
    rank: Annotated[
        int | None, typer.Option(min=1, help="DiLoCoX rank (default: the preset's).")
    ] = None,
    bits: Annotated[
        int | None,
        typer.Option(help="Bits per element: 2, 4, 8, 16 or 32 (default: the preset's)."),
    ] = None,
    inner_steps: Annotated[int, typer.Option(min=1, help="H: inner steps per outer step.")] = 100,
    micro_batch_size: Annotated[int, typer.Option(min=1, help="Sequences per micro-batch.")] = 1,
    seq_len: Annotated[int, typer.Option(min=1, help="Tokens per sequence.")] = 4096,
    micro_batches: Annotated[
        int, typer.Option(min=0, help="Micro-batches per replica per inner step (0: S).")
    ] = 0,
    recompute: Annotated[
        bool, typer.Option("--recompute/--no-recompute", help="Full activation recomputation.")
    ] = True,
    mfu: Annotated[
        float, typer.Option(min=0.01, max=1.0, help="Model FLOPs utilisation for compute time.")
    ] = 0.4,
    offload_outer: Annotated[
        bool,
        typer.Option(
            help=(
                "Keep the outer state in host memory (what the trainer does: implied by "
                "--held trainer)."
            )
        ),
    ] = False,
    held: Annotated[
        str,
        typer.Option(
            help=(
                "paper: the DiLoCoX GPU setting (ZeRO sharding "
                "over D, not implemented by the trainer); "
                "trainer: what this trainer holds today (no sharding), "
                "as measured by `veritrain bench throughput`."
            )
        ),
    ] = "paper",
    precision: Annotated[
        str,
        typer.Option(
            help=(
                "With --held trainer: the trainer's fp32, bf16 or "
                "fp64 (--held paper assumes bf16 mixed precision)."
            )
        ),
    ] = "bf16",
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the plan as one JSON object.")
    ] = False,
) -> None:
    """Will the model fit, and how long does each outer step communicate: AllReduce vs DiLoCoX."""
    from dataclasses import replace

    from trainer.errors import ConfigError
    from trainer.planner import Accelerator, Placement, Precision, Workload, fitting_alternatives
    from trainer.planner import plan as make_plan
    from trainer.presets import MODEL_PRESETS, run_preset

    model = MODEL_PRESETS[preset] if preset in MODEL_PRESETS else run_preset(preset).model
    defaults = replace(
        run_preset(preset).outer, kind="dilocox"
    )  # the preset's own DiLoCoX settings
    rank = rank or defaults.rank
    bits = bits or defaults.bits
    if bits not in (2, 4, 8, 16, 32):
        raise ConfigError(f"expected --bits 2, 4, 8, 16 or 32, got {bits}")
    outer = replace(defaults.with_rank(rank), bits=bits)  # type: ignore[arg-type]
    options: dict[str, Any] = {
        "workload": Workload(
            micro_batch_size=micro_batch_size,
            sequence_length=seq_len,
            micro_batches=micro_batches,
            recompute=recompute,
        ),
        "accelerator": Accelerator(memory_gb=gpu_memory, mfu=mfu),
        "outer": outer,
        "link_mbit": bandwidth,
        "inner_steps": inner_steps,
        "held": held,
    }
    if held not in ("paper", "trainer"):
        raise ConfigError(f"expected --held paper or trainer, got {held!r}")
    if held == "trainer":
        options["precision"] = Precision.of_trainer(precision)
        options["accelerator"] = Accelerator(memory_gb=gpu_memory, mfu=mfu, headroom_gb=0.0)
    placement = Placement(clusters=clusters, stages=stages, data_parallel=data_parallel)
    result = make_plan(model, placement=placement, offload_outer=offload_outer, **options)
    alternatives = (
        [] if result.fits else fitting_alternatives(model, placement=placement, **options)
    )
    if json_output:
        typer.echo(json.dumps({**result.to_dict(), "alternatives": alternatives}, indent=1))
        return
    typer.echo("\n".join(result.lines()))
    if alternatives:
        typer.echo("what would fit (same workload, smallest D):")
        typer.echo("\n".join(f"  {line}" for line in alternatives))
