"""``veritrain bench comm|ledger|storage|data|poison``: the measurements behind the project's claims.

Each command parses its options and calls its benchmark's one entry point in
``veritrain.bench``; ``--json`` prints that result as one JSON object on stdout (progress goes
to stderr either way).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(help="Benchmarks: communication (DiLoCoX vs AllReduce), ledger, storage, data, poisoned clusters.", no_args_is_help=True)

Quick = Annotated[bool, typer.Option("--quick", help="A shorter run (minutes on 2 cores) with the same measurements.")]
Json = Annotated[bool, typer.Option("--json", help="Print the result as one JSON object.")]
Workdir = Annotated[Path | None, typer.Option(help="Keep the benchmark's files here (default: a temporary folder).")]


@app.command("comm")
def comm(
    quick: Quick = False,
    json_output: Json = False,
    bandwidth: Annotated[float | None, typer.Option(help="Link between clusters in Mbit/s (default: derived from the paper's 107B setting).")] = None,
    clusters: Annotated[int, typer.Option(min=2, help="Clusters (outer replicas).")] = 2,
    delay_ms: Annotated[float, typer.Option(min=0.0, help="One-way delay per direction in ms (needs netem).")] = 0.0,
    shaping: Annotated[str, typer.Option(help="auto, netns-tc or software.")] = "auto",
    plots: Annotated[Path | None, typer.Option(help="Write bench-loss/throughput/exposed PNGs here.")] = None,
    outer_steps: Annotated[int | None, typer.Option(min=1, help="T of the convergence runs (default: by mode).")] = None,
    inner_steps: Annotated[int | None, typer.Option(min=1, help="H of the DiLoCo/DiLoCoX runs (default: by mode).")] = None,
    preset: Annotated[str, typer.Option(help="Run preset of the model all methods train (trainer/presets.py).")] = "tiny",
    seed: int = 0,
    rank: Annotated[int | None, typer.Option(min=1, help="DiLoCoX's low-rank rank (default: the preset's).")] = None,
    bits: Annotated[int | None, typer.Option(help="DiLoCoX's bits per factor element: 2, 4, 8, 16 or 32 (default: the preset's).")] = None,
    dense_bits: Annotated[int | None, typer.Option(help="DiLoCoX's bits for tensors sent whole: 8 or 16 (default: the preset's).")] = None,
    workdir: Workdir = None,
) -> None:
    """Convergence at equal tokens, bytes per token and throughput on an emulated slow link."""
    from veritrain.bench.comm import CommBenchConfig, run_comm_bench

    if shaping not in ("auto", "netns-tc", "software"):
        raise typer.BadParameter(f"expected auto, netns-tc or software, got {shaping!r}", param_hint="--shaping")
    config = CommBenchConfig(
        quick=quick, clusters=clusters, bandwidth_mbit=bandwidth, delay_ms=delay_ms, shaping=shaping,  # type: ignore[arg-type]
        plots=plots, outer_steps=outer_steps, inner_steps=inner_steps, seed=seed, workdir=workdir, preset=preset,
        rank=rank, bits=bits, dense_bits=dense_bits,
    )
    _print(run_comm_bench(config, say=_say), json_output)


@app.command("ledger")
def ledger(
    quick: Quick = False,
    json_output: Json = False,
    entries: Annotated[int | None, typer.Option(min=3, help="Entries of the verified run (default 10,000; 2,000 with --quick).")] = None,
    clients: Annotated[int, typer.Option(min=1, help="Concurrent HTTP clients.")] = 32,
    server_workers: Annotated[int, typer.Option(min=1, max=64, help="`veritrain serve --workers` of the server under test.")] = 1,
    requests: Annotated[int | None, typer.Option(min=1, help="Inclusion-proof requests per client.")] = None,
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
    size_mib: Annotated[int | None, typer.Option(min=2, help="The larger object size (the smaller is 1/8 of it).")] = None,
    s3: Annotated[bool, typer.Option("--s3/--no-s3", help="Measure S3 when it is configured.")] = True,
    workdir: Workdir = None,
) -> None:
    """Store-and-hash, S3 and API download throughput against raw baselines, and peak memory."""
    from veritrain.bench.storage import MiB, StorageBenchConfig, run_storage_bench

    large = (size_mib or (128 if quick else 512)) * MiB
    _print(run_storage_bench(StorageBenchConfig(sizes=(large // 8, large), s3=s3, workdir=workdir), say=_say), json_output)


@app.command("data")
def data(
    quick: Quick = False,
    json_output: Json = False,
    size_mb: Annotated[int | None, typer.Option(min=1, help="MB of synthetic text (default 1,000; 8 with --quick).")] = None,
    vocab_size: Annotated[int | None, typer.Option(min=258, help="The trained BPE's vocabulary (default 16,384; 2,048 with --quick).")] = None,
    workdir: Workdir = None,
) -> None:
    """Shard-builder throughput (tokens/s, bytes/s) and peak memory on a JSONL.gz + Parquet corpus."""
    from veritrain.bench.data import MB, DataBenchConfig, run_data_bench

    config = DataBenchConfig(
        corpus_bytes=(size_mb or (8 if quick else 1_000)) * MB,
        vocab_size=vocab_size or (2_048 if quick else 16_384),
        workdir=workdir,
    )
    _print(run_data_bench(config, say=_say), json_output)


@app.command("poison")
def poison(
    quick: Quick = False,
    json_output: Json = False,
    seeds: Annotated[int | None, typer.Option(min=1, help="Seeds (default 3; 1 with --quick).")] = None,
    clusters: Annotated[int, typer.Option(min=3, help="Clusters, one of them attacking.")] = 4,
    outer_steps: Annotated[int | None, typer.Option(min=3, help="T (default 8; 5 with --quick).")] = None,
    inner_steps: Annotated[int | None, typer.Option(min=1, help="H (default the preset's; 10 with --quick).")] = None,
) -> None:
    """Detection rate per attack, false positives on clean runs, loss with and without exclusion."""
    from veritrain.bench.poison import PoisonBenchConfig, run_poison_bench

    config = PoisonBenchConfig(
        quick=quick, seeds=seeds, clusters=clusters, outer_steps=outer_steps, inner_steps=inner_steps
    )
    _print(run_poison_bench(config, say=_say), json_output)


def _print(result: Any, json_output: bool) -> None:
    if json_output:
        typer.echo(json.dumps(result.to_dict(), indent=1, sort_keys=True))
    else:
        typer.echo("\n".join(result.lines()))


def _say(message: str) -> None:
    typer.echo(f"veritrain bench: {message}", err=True)
