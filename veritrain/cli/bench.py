"""``veritrain bench comm|convergence|ledger|storage|data|audit|throughput|poison``: the
measurements behind the project's claims.

Each command parses its options and calls its benchmark's one entry point in
``veritrain.bench``; ``--json`` prints that result as one JSON object on stdout (progress goes
to stderr either way).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    help=(
        "Benchmarks: communication (DiLoCoX vs AllReduce), "
        "ledger, storage, data, poisoned clusters."
    ),
    no_args_is_help=True,
)

Quick = Annotated[
    bool,
    typer.Option("--quick", help="A shorter run (minutes on 2 cores) with the same measurements."),
]
Json = Annotated[bool, typer.Option("--json", help="Print the result as one JSON object.")]
Workdir = Annotated[
    Path | None, typer.Option(help="Keep the benchmark's files here (default: a temporary folder).")
]


@app.command("comm")
def comm(
    quick: Quick = False,
    json_output: Json = False,
    bandwidth: Annotated[
        float | None,
        typer.Option(
            help="Link between clusters in Mbit/s (default: derived from the paper's 107B setting)."
        ),
    ] = None,
    clusters: Annotated[int, typer.Option(min=2, help="Clusters (outer replicas).")] = 2,
    delay_ms: Annotated[
        float, typer.Option(min=0.0, help="One-way delay per direction in ms (needs netem).")
    ] = 0.0,
    shaping: Annotated[str, typer.Option(help="auto, netns-tc or software.")] = "auto",
    plots: Annotated[
        Path | None, typer.Option(help="Write bench-loss/throughput/exposed PNGs here.")
    ] = None,
    outer_steps: Annotated[
        int | None, typer.Option(min=1, help="T of the convergence runs (default: by mode).")
    ] = None,
    inner_steps: Annotated[
        int | None, typer.Option(min=1, help="H of the DiLoCo/DiLoCoX runs (default: by mode).")
    ] = None,
    preset: Annotated[
        str, typer.Option(help="Run preset of the model all methods train (trainer/presets.py).")
    ] = "tiny",
    seed: int = 0,
    rank: Annotated[
        int | None, typer.Option(min=1, help="DiLoCoX's low-rank rank (default: the preset's).")
    ] = None,
    bits: Annotated[
        int | None,
        typer.Option(
            help="DiLoCoX's bits per factor element: 2, 4, 8, 16 or 32 (default: the preset's)."
        ),
    ] = None,
    dense_bits: Annotated[
        int | None,
        typer.Option(
            help="DiLoCoX's bits for tensors sent whole: 8 or 16 (default: the preset's)."
        ),
    ] = None,
    exchange: Annotated[
        str | None,
        typer.Option(
            help="How DiLoCoX combines payloads: all-gather, or owner-reduce (bytes per cluster "
            "that do not grow with the clusters; contribution scores off). Default: auto, the "
            "all-gather at 2 clusters and the owner-reduce from 3."
        ),
    ] = None,
    workdir: Workdir = None,
) -> None:
    """Convergence at equal tokens, bytes per token and throughput on an emulated slow link."""
    from veritrain.bench.comm import CommBenchConfig, run_comm_bench

    if shaping not in ("auto", "netns-tc", "software"):
        raise typer.BadParameter(
            f"expected auto, netns-tc or software, got {shaping!r}", param_hint="--shaping"
        )
    if exchange not in (None, "all-gather", "owner-reduce"):
        raise typer.BadParameter(
            f"expected all-gather or owner-reduce, got {exchange!r}", param_hint="--exchange"
        )
    config = CommBenchConfig(
        quick=quick,
        clusters=clusters,
        bandwidth_mbit=bandwidth,
        delay_ms=delay_ms,
        shaping=shaping,  # type: ignore[arg-type]
        plots=plots,
        outer_steps=outer_steps,
        inner_steps=inner_steps,
        seed=seed,
        workdir=workdir,
        preset=preset,
        rank=rank,
        bits=bits,
        dense_bits=dense_bits,
        exchange=exchange,  # type: ignore[arg-type]  # checked above
    )
    _print(run_comm_bench(config, say=_say), json_output)


@app.command("convergence")
def convergence(
    quick: Quick = False,
    json_output: Json = False,
    preset: Annotated[
        str, typer.Option(help="Run preset every method trains (trainer/presets.py).")
    ] = "tiny",
    seed: Annotated[
        list[int] | None, typer.Option(help="Seeds (repeat the option); default 0, 1 and 2.")
    ] = None,
    outer_steps: Annotated[
        int | None, typer.Option(min=1, help="T of every run (default: by mode).")
    ] = None,
    inner_steps: Annotated[
        int | None, typer.Option(min=1, help="H of every run (default: by mode).")
    ] = None,
    levers: Annotated[
        bool, typer.Option("--levers", help="Also train each lever of issue #24 on its own.")
    ] = False,
    jobs: Annotated[int, typer.Option(min=1, help="Runs trained at once, a process each.")] = 1,
    plot: Annotated[
        Path | None, typer.Option(help="Write the loss-gap-per-outer-step PNG here.")
    ] = None,
    device: Annotated[
        str, typer.Option(help="cpu or cuda: where the runs train (a GPU for larger presets).")
    ] = "cpu",
    arm: Annotated[
        list[str] | None,
        typer.Option(
            help="Train only this arm (repeat; a method or a lever name); AllReduce always."
        ),
    ] = None,
    inner_lr: Annotated[
        float | None,
        typer.Option(help="Peak inner learning rate of every arm (default: the preset's)."),
    ] = None,
    warmup_steps: Annotated[
        int | None,
        typer.Option(min=0, help="Inner warm-up steps of every arm (default: the preset's)."),
    ] = None,
    beta1: Annotated[
        float | None,
        typer.Option(help="Inner AdamW beta1 of every arm (default: the preset's)."),
    ] = None,
    rounds: Annotated[
        str | None,
        typer.Option(
            help="H of each round, comma-separated (e.g. 100,15,15,15,15,15,15,10): rounds of "
            "unequal length, simulated only; replaces --outer-steps and --inner-steps."
        ),
    ] = None,
) -> None:
    """Loss gap to AllReduce per outer step for DiLoCo and DiLoCoX, compute only (no link)."""
    from veritrain.bench.convergence_study import (
        ConvergenceStudyConfig,
        run_convergence_study,
    )

    config = ConvergenceStudyConfig(
        quick=quick,
        preset=preset,
        seeds=tuple(seed) if seed else (0, 1, 2),
        outer_steps=outer_steps,
        inner_steps=inner_steps,
        levers=levers,
        jobs=jobs,
        plot=plot,
        device=device,
        arms=tuple(arm or ()),
        inner_lr=inner_lr,
        warmup_steps=warmup_steps,
        beta1=beta1,
        rounds=_round_lengths(rounds),
    )
    _print(run_convergence_study(config, say=_say), json_output)


def _round_lengths(text: str | None) -> tuple[int, ...]:
    if text is None:
        return ()
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise typer.BadParameter(
            f"expected inner step counts separated by commas, got {text!r}", param_hint="--rounds"
        ) from None


@app.command("ledger")
def ledger(
    quick: Quick = False,
    json_output: Json = False,
    entries: Annotated[
        int | None,
        typer.Option(
            min=3, help="Entries of the verified run (default 10,000; 2,000 with --quick)."
        ),
    ] = None,
    clients: Annotated[int, typer.Option(min=1, help="Concurrent HTTP clients.")] = 32,
    server_workers: Annotated[
        int,
        typer.Option(min=1, max=64, help="`veritrain serve --workers` of the server under test."),
    ] = 1,
    requests: Annotated[
        int | None, typer.Option(min=1, help="Inclusion-proof requests per client.")
    ] = None,
    workdir: Workdir = None,
) -> None:
    """Appends/s (SQLite, PostgreSQL), verifying a 10,000-entry run, inclusion-proof latency."""
    from veritrain.bench.ledger import (
        LedgerBenchConfig,
        postgres_url_from_environment,
        run_ledger_bench,
    )

    config = LedgerBenchConfig(
        verify_entries=entries or (2_000 if quick else 10_000),
        postgres_appends=300 if quick else 1_000,
        clients=clients,
        server_workers=server_workers,
        requests_per_client=requests or (20 if quick else 50),
        postgres_url=postgres_url_from_environment(),
        workdir=workdir,
    )
    _print(run_ledger_bench(config, say=_say), json_output)


@app.command("storage")
def storage(
    quick: Quick = False,
    json_output: Json = False,
    size_mib: Annotated[
        int | None, typer.Option(min=2, help="The larger object size (the smaller is 1/8 of it).")
    ] = None,
    s3: Annotated[
        bool, typer.Option("--s3/--no-s3", help="Measure S3 when it is configured.")
    ] = True,
    workdir: Workdir = None,
) -> None:
    """Store-and-hash, S3 and API download throughput against raw baselines, and peak memory."""
    from veritrain.bench.storage import MiB, StorageBenchConfig, run_storage_bench

    large = (size_mib or (128 if quick else 512)) * MiB
    _print(
        run_storage_bench(
            StorageBenchConfig(sizes=(large // 8, large), s3=s3, workdir=workdir), say=_say
        ),
        json_output,
    )


@app.command("data")
def data(
    quick: Quick = False,
    json_output: Json = False,
    size_mb: Annotated[
        int | None,
        typer.Option(min=1, help="MB of synthetic text (default 1,000; 8 with --quick)."),
    ] = None,
    vocab_size: Annotated[
        int | None,
        typer.Option(
            min=258, help="The trained BPE's vocabulary (default 16,384; 2,048 with --quick)."
        ),
    ] = None,
    workdir: Workdir = None,
) -> None:
    """Shard-builder throughput (tokens/s, bytes/s) and peak memory on a JSONL.gz + Parquet
    corpus."""
    from veritrain.bench.data import MB, DataBenchConfig, run_data_bench

    config = DataBenchConfig(
        corpus_bytes=(size_mb or (8 if quick else 1_000)) * MB,
        vocab_size=vocab_size or (2_048 if quick else 16_384),
        workdir=workdir,
    )
    _print(run_data_bench(config, say=_say), json_output)


@app.command("audit")
def audit(
    quick: Quick = False,
    json_output: Json = False,
    inner_steps: Annotated[
        int | None, typer.Option(min=2, help="H of the audited step (default 20; 8 with --quick).")
    ] = None,
    seed: int = 0,
    workdir: Workdir = None,
) -> None:
    """Legitimately different vs forged re-executions of one step: the tolerance bound, measured."""
    from veritrain.bench.audit import AuditBenchConfig, run_audit_bench

    config = AuditBenchConfig(quick=quick, inner_steps=inner_steps, seed=seed, workdir=workdir)
    _print(run_audit_bench(config, say=_say), json_output)


@app.command("throughput")
def throughput(
    json_output: Json = False,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    precision: Annotated[str, typer.Option(help="fp32, bf16 (autocast) or fp64.")] = "fp32",
    activation_checkpointing: Annotated[
        bool,
        typer.Option(
            "--activation-checkpointing", help="Recompute each decoder layer in the backward pass."
        ),
    ] = False,
    preset: Annotated[str, typer.Option(help="Model preset (trainer/presets.py).")] = "small",
    stages: Annotated[int, typer.Option(min=1, help="S: pipeline stages of the cluster.")] = 2,
    micro_batches: Annotated[int, typer.Option(min=1, help="Micro-batches per inner step.")] = 4,
    micro_batch_size: Annotated[int, typer.Option(min=1, help="Sequences per micro-batch.")] = 4,
    steps: Annotated[int, typer.Option(min=1, help="Inner steps timed per stage.")] = 3,
    peak_tflops: Annotated[
        float | None,
        typer.Option(
            min=1e-6,
            help=(
                "The device's peak TFLOP/s for MFU (default: a GPU's datasheet dense rate, "
                "else a measured matrix product's rate)."
            ),
        ),
    ] = None,
    threads: Annotated[
        int | None, typer.Option(min=1, help="CPU intra-op threads (default: torch's).")
    ] = None,
    commitments: Annotated[
        bool,
        typer.Option(
            "--commitments",
            help="Also time the per-inner-step commitments the trainer makes after each step.",
        ),
    ] = False,
) -> None:
    """Tokens/s, MFU and each stage's measured peak memory next to the planner's estimate."""
    from veritrain.bench.step_throughput import ThroughputBenchConfig, run_throughput_bench

    if device not in ("cpu", "cuda"):
        raise typer.BadParameter(f"expected cpu or cuda, got {device!r}", param_hint="--device")
    if precision not in ("fp32", "bf16", "fp64"):
        raise typer.BadParameter(
            f"expected fp32, bf16 or fp64, got {precision!r}", param_hint="--precision"
        )
    config = ThroughputBenchConfig(
        preset=preset,
        device=device,  # type: ignore[arg-type]  # checked above
        precision=precision,  # type: ignore[arg-type]  # checked above
        activation_checkpointing=activation_checkpointing,
        stages=stages,
        micro_batches=micro_batches,
        micro_batch_size=micro_batch_size,
        timed_steps=steps,
        peak_tflops=peak_tflops,
        threads=threads,
        commitments=commitments,
    )
    _print(run_throughput_bench(config, say=_say), json_output)


@app.command("poison")
def poison(
    quick: Quick = False,
    json_output: Json = False,
    seeds: Annotated[
        int | None, typer.Option(min=1, help="Seeds (default 3; 1 with --quick).")
    ] = None,
    clusters: Annotated[int, typer.Option(min=3, help="Clusters, one of them attacking.")] = 4,
    outer_steps: Annotated[
        int | None, typer.Option(min=3, help="T (default 8; 5 with --quick).")
    ] = None,
    inner_steps: Annotated[
        int | None, typer.Option(min=1, help="H (default the preset's; 10 with --quick).")
    ] = None,
) -> None:
    """Detection rate per attack, false positives on clean runs, loss with and without exclusion."""
    from veritrain.bench.poison import PoisonBenchConfig, run_poison_bench

    config = PoisonBenchConfig(
        quick=quick,
        seeds=seeds,
        clusters=clusters,
        outer_steps=outer_steps,
        inner_steps=inner_steps,
    )
    _print(run_poison_bench(config, say=_say), json_output)


def _print(result: Any, json_output: bool) -> None:
    if json_output:
        typer.echo(json.dumps(result.to_dict(), indent=1, sort_keys=True))
    else:
        typer.echo("\n".join(result.lines()))


def _say(message: str) -> None:
    typer.echo(f"veritrain bench: {message}", err=True)
