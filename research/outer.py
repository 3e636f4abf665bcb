"""Convergence sweeps behind the DiLoCoX defaults (docs/outer-algorithm.md).

From the repository root:

    python -m research.outer --sweep baselines --out /tmp/outer-sweeps
    python -m research.outer --report /tmp/outer-sweeps --plot docs/img/outer-tradeoff.png
    python -m research.outer --model tiny --sweep tiny --out /tmp/tiny-sweeps   # the tiny preset

Each sweep appends one JSON line per run to ``<out>/<sweep>.jsonl`` (runs already there are
skipped, so a sweep can be resumed). ``--report`` prints the markdown table of every run (loss
gap to plain DiLoCo and AllReduce, bytes ratio) and draws the trade-off plot.

Every run trains with the trainer's inner loop (veritrain/bench/simulate.py): ``InnerConfig()``, the
defaults a ``TrainConfig`` gets, with a warm-up of ``WARMUP_STEPS`` (``--warmup-steps``).
Data: byte-level tokens of this Python's standard-library ``.py`` sources (sorted paths, so
the corpus is identical on every machine with the same Python version); every 20th file is
held out. This loader is deliberately tiny and private to the research script -- the
trainer's own data pipeline lives in trainer/data.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from trainer.config import InnerConfig
from trainer.model import ModelConfig
from trainer.outer.config import OuterConfig
from veritrain.bench.simulate import Batch, Batches, SimulationConfig, SimulationResult, simulate

MODEL = ModelConfig(
    vocab_size=256,
    context=64,
    num_hidden_layers=3,
    hidden_size=128,
    intermediate_size=384,
    num_attention_heads=4,
    num_key_value_heads=4,
)
"""≈0.6M parameters, byte-level: runs 1,500 steps × 2 clusters in a few minutes on one core."""
BATCH = 8
"""Sequences per cluster per inner step."""
CORPUS_BYTES = 16 * 2**20
EVAL_SEQUENCES = 64
WARMUP_STEPS = 75
"""Inner warm-up of the sweeps (5 % of their 1,500 steps); every other inner setting is
``InnerConfig()``'s, the trainer's default. Its default warm-up of 10 steps is sized for the
demo's 120-step runs: at 1,500 steps it costs plain DiLoCo 31 % (docs/outer-algorithm.md §8)."""


# ----------------------------------------------------------------------------------- data


def stdlib_corpus(limit: int = CORPUS_BYTES) -> tuple[torch.Tensor, torch.Tensor, str]:
    """(train bytes, held-out bytes, description) from the standard library's .py files."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)
    train, held_out, size = bytearray(), bytearray(), 0
    for index, path in enumerate(files):
        data = path.read_bytes()
        (held_out if index % 20 == 0 else train).extend(data)
        size += len(data)
        if size >= limit:
            break
    version = ".".join(map(str, sys.version_info[:3]))
    description = (
        f"python {version} stdlib .py, {len(train)} train / {len(held_out)} held-out bytes"
    )
    return _as_tensor(train), _as_tensor(held_out), description


def make_batches(
    tokens: torch.Tensor, *, context: int, batch: int, n_clusters: int, seed: int
) -> Batches:
    """``batches(cluster, step)``: ``batch`` sequences per call, drawn without overlap from a
    seeded permutation of the corpus' ``context``-long chunks in (step, cluster) order -- so
    AllReduce on the union of the clusters' batches sees exactly the same tokens."""
    chunks = (tokens.numel() - 1) // context
    order = torch.randperm(chunks, generator=torch.Generator().manual_seed(seed))
    offsets = torch.arange(context + 1)

    def batches(cluster: int, step: int) -> Batch:
        first = (step * n_clusters + cluster) * batch
        index = order[torch.arange(first, first + batch) % chunks] * context
        window = tokens[index[:, None] + offsets[None, :]].long()  # (batch, context + 1)
        return window[:, :-1], window[:, 1:]

    return batches


def make_eval_batches(tokens: torch.Tensor, *, context: int, sequences: int) -> list[Batch]:
    """Evenly spaced held-out windows, in batches of 16."""
    stride = (tokens.numel() - context - 1) // sequences
    starts = torch.arange(sequences) * stride
    window = tokens[starts[:, None] + torch.arange(context + 1)[None, :]].long()
    return [(w[:, :-1], w[:, 1:]) for w in torch.split(window, 16)]


def _as_tensor(data: bytearray) -> torch.Tensor:
    return torch.frombuffer(data, dtype=torch.uint8).clone()


# ----------------------------------------------------------------------------------- sweeps


def _dilocox(**overrides: Any) -> OuterConfig:
    return OuterConfig(kind="dilocox", **overrides)


def sweeps() -> dict[str, dict[str, tuple[str, OuterConfig | None, dict[str, Any]]]]:
    """Named sweeps: run name -> (method, outer config, SimulationConfig overrides)."""
    fixed: dict[str, Any] = {"adaptive_rank": False, "anomaly_checks": False}
    blocking: dict[str, Any] = {"overlap": False, **fixed}
    delayed: dict[str, Any] = {"delay_proxy": "anchored", "outer_lr": 0.5, "outer_momentum": 0.8}

    def compress(rank: int, bits: int, ef: str = "local", **extra: Any) -> OuterConfig:
        settings = {
            "rank": rank,
            "min_rank": 1,
            "max_rank": max(rank, 64),
            "bits": bits,
            "error_feedback": ef,
        }
        return _dilocox(**{**settings, **extra})

    return {
        "baselines": {
            "allreduce": ("allreduce", None, {}),
            "diloco": ("diloco", OuterConfig(kind="diloco"), {}),
        },
        "delay": {
            f"overlap-{proxy}-lr{lr}-m{m}": (
                "dilocox",
                _dilocox(compression=False, delay_proxy=proxy, outer_lr=lr, outer_momentum=m),
                {},
            )
            for proxy in ("none", "own", "eager", "anchored")
            for lr, m in ((0.7, 0.9), (0.5, 0.8))
        },
        "compression": {
            f"r{r}-int{b}-ef_{ef}": ("dilocox", compress(r, b, ef, two_sided=False, **blocking), {})
            for r, b, ef in (
                (16, 8, "none"),
                (16, 8, "buffer"),
                (16, 8, "local"),
                (8, 8, "local"),
                (32, 8, "local"),
                (16, 4, "local"),
                (32, 4, "local"),
                (64, 4, "local"),
            )
        },
        "combined": {
            "blocking-two-r16-int4": ("dilocox", compress(16, 4, two_sided=True, **blocking), {}),
            "overlap-alt-r32-int4": (
                "dilocox",
                compress(32, 4, two_sided=False, **delayed, **fixed),
                {},
            ),
            **{
                f"overlap-two-r{r}-int{b}": (
                    "dilocox",
                    compress(r, b, two_sided=True, **delayed, **fixed),
                    {},
                )
                for r, b in ((16, 4), (8, 8), (24, 4), (12, 4))
            },
            "overlap-two-adaptive-r16-int4": (
                "dilocox",
                compress(
                    16, 4, two_sided=True, **delayed, adaptive_rank=True, anomaly_checks=False
                ),
                {},
            ),
        },
        "horizon": {
            **{
                f"diloco-H{h}": ("diloco", OuterConfig(kind="diloco"), {"inner_steps": h})
                for h in (50, 100)
            },
            **{
                f"overlap-alt-r{r}-int4-H{h}": (
                    "dilocox",
                    compress(r, 4, two_sided=False, **delayed, **fixed),
                    {"inner_steps": h},
                )
                for r, h in ((32, 50), (16, 50), (32, 100))
            },
        },
        "refine": {
            "blocking-alt-r32-int4-lr0.5-m0.8": (
                "dilocox",
                compress(32, 4, two_sided=False, outer_lr=0.5, outer_momentum=0.8, **blocking),
                {},
            ),
            "overlap-alt-r28-int4": (
                "dilocox",
                compress(28, 4, two_sided=False, **delayed, **fixed),
                {},
            ),
            "overlap-alt-r48-int4": (
                "dilocox",
                compress(48, 4, two_sided=False, **delayed, **fixed),
                {},
            ),
            **{
                f"overlap-alt-adaptive{energy}-r32-int4": (
                    "dilocox",
                    compress(
                        32,
                        4,
                        two_sided=False,
                        **delayed,
                        adaptive_rank=True,
                        rank_energy=energy,
                        min_rank=8,
                        anomaly_checks=False,
                    ),
                    {},
                )
                for energy in (0.98, 0.995)
            },
        },
        # The tiny preset's trade-off (docs/trainer.md): baselines, the defaults, rank and H.
        "tiny": {
            "allreduce": ("allreduce", None, {}),
            "diloco": ("diloco", OuterConfig(kind="diloco"), {}),
            "diloco-lr0.5-m0.8": (
                "diloco",
                OuterConfig(kind="diloco", outer_lr=0.5, outer_momentum=0.8),
                {},
            ),
            "dilocox-defaults": ("dilocox", OuterConfig(kind="dilocox"), {}),
            **{
                f"overlap-alt-r{r}-int4-H{h}": (
                    "dilocox",
                    compress(r, 4, two_sided=False, **delayed, **fixed),
                    {"inner_steps": h},
                )
                for r, h in ((16, 25), (12, 25), (8, 25), (28, 50), (16, 50))
            },
            "diloco-H50": ("diloco", OuterConfig(kind="diloco"), {"inner_steps": 50}),
            **{
                f"overlap-alt-r{r}-int8-H25": (
                    "dilocox",
                    compress(r, 8, two_sided=False, **delayed, **fixed),
                    {},
                )
                for r in (8, 16)
            },
            # Bits instead of rank: int2 factors, and the tensors sent whole as int8.
            **{
                f"overlap-alt-r{r}-int{b}-dense{d}-H25": (
                    "dilocox",
                    compress(r, b, two_sided=False, dense_bits=d, **delayed, **fixed),
                    {},
                )
                for r, b, d in ((28, 4, 8), (28, 2, 16), (28, 2, 8), (16, 2, 8))
            },
            # The tiny preset's settings under other outer learning rates / momenta (and seed 1
            # for the best of them against 0.5 / 0.8).
            **{
                f"overlap-alt-r28-int2-dense8-lr{lr}-m{m}" + ("-seed1" if seed else ""): (
                    "dilocox",
                    compress(
                        28,
                        2,
                        two_sided=False,
                        dense_bits=8,
                        **{**delayed, "outer_lr": lr, "outer_momentum": m},
                        **fixed,
                    ),
                    {"seed": seed} if seed else {},
                )
                for lr, m, seed in (
                    (0.6, 0.8, 0),
                    (0.4, 0.8, 0),
                    (0.5, 0.7, 0),
                    (0.5, 0.9, 0),
                    (0.7, 0.8, 0),
                    (0.8, 0.8, 0),
                    (0.5, 0.8, 1),
                    (0.6, 0.8, 1),
                )
            },
        },
        "confirm": {
            "diloco-lr0.5-m0.8": (
                "diloco",
                OuterConfig(kind="diloco", outer_lr=0.5, outer_momentum=0.8),
                {},
            ),
            "dilocox-defaults": ("dilocox", OuterConfig(kind="dilocox"), {}),
            "dilocox-adaptive-r28-max32": (
                "dilocox",
                OuterConfig(kind="dilocox", adaptive_rank=True, max_rank=32),
                {},
            ),
            **{
                f"{name}-seed1": (method, outer, {"seed": 1})
                for name, method, outer in (
                    ("allreduce", "allreduce", None),
                    ("diloco", "diloco", OuterConfig(kind="diloco")),
                    ("dilocox-defaults", "dilocox", OuterConfig(kind="dilocox")),
                )
            },
        },
    }


def run_sweep(
    name: str,
    out: Path,
    *,
    only: list[str] | None = None,
    model: ModelConfig = MODEL,
    warmup_steps: int = WARMUP_STEPS,
) -> None:
    torch.set_num_threads(1)
    runs = sweeps()[name]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.jsonl"
    done = (
        {json.loads(line)["run"] for line in path.read_text().splitlines()}
        if path.exists()
        else set()
    )
    train, held_out, description = stdlib_corpus()
    eval_batches = make_eval_batches(held_out, context=model.context, sequences=EVAL_SEQUENCES)
    print(description, flush=True)
    for run, (method, outer, overrides) in runs.items():
        if run in done or (only and run not in only):
            continue
        config = SimulationConfig(
            model=model,
            method=method,  # type: ignore[arg-type]
            outer=outer or OuterConfig(),
            inner=InnerConfig(warmup_steps=warmup_steps),
            **overrides,
        )
        batches = make_batches(
            train,
            context=model.context,
            batch=BATCH,
            n_clusters=config.n_clusters,
            seed=config.seed,
        )
        print(f"== {name}/{run}", flush=True)
        result = simulate(
            config,
            batches=batches,
            eval_batches=eval_batches,
            progress=lambda line: print("   " + line, flush=True),
        )
        with path.open("a") as f:
            f.write(json.dumps(_record(name, run, config, result)) + "\n")
        print(
            f"   final {result.final_eval_loss:.4f}  bytes {result.bytes_per_cluster:.3g}  "
            f"{result.seconds:.0f}s",
            flush=True,
        )


def _record(
    sweep: str, run: str, config: SimulationConfig, result: SimulationResult
) -> dict[str, Any]:
    return {
        "sweep": sweep,
        "run": run,
        "method": config.method,
        "inner_steps": config.inner_steps,
        "total_steps": config.total_steps,
        "seed": config.seed,
        "parameters": config.model.parameter_count(),
        "inner": dataclasses.asdict(config.inner),
        "outer": config.outer.to_dict() if config.method != "allreduce" else None,
        **dataclasses.asdict(result),
    }


# ----------------------------------------------------------------------------------- report


def load(folder: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl")):
        rows.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return rows


def report(rows: list[dict[str, Any]]) -> Iterator[str]:
    """Markdown table: loss, gap to AllReduce and to plain DiLoCo at H = 25 (same steps, so the
    same tokens), bytes ratio against the AllReduce baseline."""
    base = _baselines(rows)
    yield (
        "| sweep | run | H | held-out loss | vs AllReduce | vs DiLoCo | bytes/cluster "
        "| AllReduce ÷ bytes | ranks |"
    )
    yield "|---|---|---|---|---|---|---|---|---|"
    for r in rows:
        # The references: AllReduce and DiLoCo at H = 25, same steps (tokens) and seed.
        allreduce = base.get((25, r["total_steps"], r.get("seed", 0), "allreduce"))
        diloco = base.get((25, r["total_steps"], r.get("seed", 0), "diloco"))
        loss = r["final_eval_loss"]
        gap_ar = _gap(loss, allreduce)
        gap_dl = _gap(loss, diloco)
        ratio = (
            r["allreduce_bytes_per_cluster"] / r["bytes_per_cluster"]
            if r["bytes_per_cluster"]
            else math.inf
        )
        ranks = sorted(set(r["ranks"]))
        rank_text = "-" if not ranks or ranks == [0] else f"{r['ranks'][0]}→{r['ranks'][-1]}"
        yield (
            f"| {r['sweep']} | {r['run']} | {r['inner_steps']} "
            f"| {loss:.4f}{' (diverged)' if r['diverged'] else ''} "
            f"| {gap_ar} | {gap_dl} | {r['bytes_per_cluster']:.3g} | {ratio:,.0f}× | {rank_text} |"
        )


def _baselines(rows: list[dict[str, Any]]) -> dict[tuple[int, int, int, str], dict[str, Any]]:
    """AllReduce and plain-DiLoCo (paper defaults) runs by (H, steps, seed, method)."""
    return {
        (r["inner_steps"], r["total_steps"], r.get("seed", 0), r["method"]): r
        for r in rows
        if r["method"] == "allreduce"
        or (
            r["method"] == "diloco"
            and (r["outer"]["outer_lr"], r["outer"]["outer_momentum"]) == (0.7, 0.9)
        )
    }


def _gap(loss: float, reference: dict[str, Any] | None) -> str:
    if reference is None or not math.isfinite(loss):
        return "-"
    return f"{100.0 * (loss / reference['final_eval_loss'] - 1.0):+.1f}%"


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Loss gap to plain DiLoCo against the AllReduce ÷ bytes ratio, one point per compressed
    run (seed 0; uncompressed runs all sit at H× and are in the table)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    diloco = {
        (steps, seed): r["final_eval_loss"]
        for (h, steps, seed, method), r in _baselines(rows).items()
        if method == "diloco" and h == 25
    }
    top = 25.0
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for sweep in sorted({r["sweep"] for r in rows}):
        points = [
            (
                r["allreduce_bytes_per_cluster"] / r["bytes_per_cluster"],
                100.0 * (r["final_eval_loss"] / diloco[(r["total_steps"], 0)] - 1.0),
                r,
            )
            for r in rows
            if r["sweep"] == sweep
            and r.get("seed", 0) == 0
            and (r["total_steps"], 0) in diloco
            and r["outer"]
            and r["outer"]["kind"] == "dilocox"
            and r["outer"]["compression"]
            and math.isfinite(r["final_eval_loss"])
        ]
        if not points:
            continue
        ax.scatter(
            [x for x, _, _ in points], [min(y, top) for _, y, _ in points], label=sweep, s=22
        )
        for x, y, r in points:
            label = r["run"] + (f" ({y:+.0f}%)" if y > top else "")
            ax.annotate(
                label, (x, min(y, top)), fontsize=5.5, xytext=(3, 2), textcoords="offset points"
            )
    ax.set_xscale("log")
    ax.set_ylim(-2.0, top + 2.0)
    ax.axhline(0.0, color="gray", lw=0.8)
    ax.axhline(3.0, color="green", lw=0.8, ls="--", label="3% above DiLoCo")
    ax.axhline(5.0, color="orange", lw=0.8, ls="--", label="5% above DiLoCo")
    ax.axvline(1000.0, color="red", lw=0.8, ls=":", label="1,000× fewer bytes than AllReduce")
    ax.set_xlabel("bytes sent by AllReduce ÷ bytes sent (per cluster, same tokens)")
    ax.set_ylabel("held-out loss above plain DiLoCo, H=25 (%)")
    # Rows written before "parameters" was recorded are the research model's.
    sizes = sorted({r.get("parameters", MODEL.parameter_count()) for r in rows})
    shown = " / ".join(f"{n:,}" for n in sizes)
    ax.set_title(
        f"DiLoCoX compression trade-off: {shown}-parameter "
        "byte-level Qwen2-shaped model, 2 clusters"
    )
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)


def plot_curves(rows: list[dict[str, Any]], path: Path, runs: list[str]) -> None:
    """Held-out loss against inner steps for the named runs (``sweep/run``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    by_name = {f"{r['sweep']}/{r['run']}": r for r in rows}
    for name in runs:
        if name in by_name:
            steps, losses = zip(*by_name[name]["curve"], strict=True)
            ax.plot(steps, losses, marker=".", label=name)
    ax.set_xlabel("inner steps per cluster (equal tokens across methods)")
    ax.set_ylabel("held-out loss (nats/byte)")
    ax.set_ylim(top=2.6)
    ax.set_title("Held-out loss of the global parameters")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sweep", choices=sorted(sweeps()), help="run this sweep")
    parser.add_argument("--only", nargs="*", help="run only these runs of the sweep")
    parser.add_argument(
        "--model",
        default="research",
        help="'research' (the 0.6M model above) or a model preset of trainer/presets.py, e.g. tiny",
    )
    parser.add_argument(
        "--warmup-steps",
        type=int,
        default=WARMUP_STEPS,
        help="inner warm-up steps (InnerConfig.warmup_steps; everything else is InnerConfig())",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("/tmp/outer-sweeps"), help="folder of .jsonl results"
    )
    parser.add_argument("--report", type=Path, help="print the table of every run in this folder")
    parser.add_argument("--plot", type=Path, help="with --report: write the trade-off PNG here")
    parser.add_argument("--curves", type=Path, help="with --report: write a loss-curve PNG here")
    parser.add_argument("--curve-runs", nargs="*", default=[], help="sweep/run names for --curves")
    args = parser.parse_args(argv)
    if args.sweep:
        run_sweep(
            args.sweep,
            args.out,
            only=args.only,
            model=_model(args.model),
            warmup_steps=args.warmup_steps,
        )
    if args.report:
        rows = load(args.report)
        for line in report(rows):
            print(line)
        if args.plot:
            plot(rows, args.plot)
        if args.curves:
            plot_curves(rows, args.curves, args.curve_runs)


def _model(name: str) -> ModelConfig:
    if name == "research":
        return MODEL
    from trainer.presets import MODEL_PRESETS  # the script's choice, not the algorithm's

    if name not in MODEL_PRESETS:
        raise SystemExit(
            f"expected --model research or one of {', '.join(MODEL_PRESETS)}, got {name!r}"
        )
    return MODEL_PRESETS[name]


if __name__ == "__main__":
    main()
