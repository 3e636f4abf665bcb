"""``veritrain bench comm``: DiLoCoX against synchronous AllReduce and plain DiLoCo.

1. **Convergence at equal tokens** (convergence.py): the three methods train the same model
   on the same data in the same order with the same seed and token budget, with the trainer's
   own code (``method="allreduce" | "diloco" | "dilocox"``, the preset's DiLoCoX settings
   as they are in the repository). Held-out loss curves, final loss, and the bytes each sends
   between clusters (trainer/outer/accounting.py).
2. **The link.** Unless ``--bandwidth`` is given it is chosen so that the AllReduce baseline
   spends the same share of its step time communicating as the DiLoCoX paper's 107B setting
   does at 1 Gbps: the planner (trainer/planner.py) gives that share for ``qwen1.5-107b`` on
   the paper's topology, and the link follows from our own AllReduce run's bytes and compute
   per inner step (``bandwidth_for_comm_fraction``). The derivation is part of the output.
3. **Throughput on the emulated link** (throughput.py): each cluster's ranks in their own
   network namespace behind a ``tc`` shaped veth pair (netns.py), or, where namespaces cannot
   be made, on loopback behind the software shaper (software_shaper.py); a preflight transfer
   measures what the link really carries. AllReduce, DiLoCo, DiLoCoX and DiLoCoX without the
   overlap run for a few outer steps each: tokens/s, exposed communication, utilisation.

The numbers are put together by comm_results.py; ``--plots DIR`` draws them (plots.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from trainer.api import default_data_dir
from trainer.config import TrainConfig
from trainer.data.build import prepare_data
from trainer.outer.accounting import allgather_bytes_per_outer_step, allreduce_bytes_per_outer_step
from trainer.planner import Placement, bandwidth_for_comm_fraction, plan
from trainer.presets import MODEL_PRESETS, run_preset
from veritrain.bench.comm_results import LinkReport, assemble, compute_per_inner_step
from veritrain.bench.convergence import (
    eval_tokens,
    method_config,
    run_convergence,
    whole_held_out,
)
from veritrain.bench.metrics_recorder import StepMetrics
from veritrain.bench.netns import NetnsLink, emulated_link, netem_available, netns_unavailable
from veritrain.bench.scratch import scratch_dir
from veritrain.bench.throughput import LinkRun, LinkSetup, Shaping, run_on_link
from veritrain.errors import BenchError

PAPER_MODEL = "qwen1.5-107b"
PAPER_PLACEMENT = Placement(clusters=2, stages=8, data_parallel=2)
"""DiLoCoX Fig. 1 (Qi et al. 2025, arXiv 2506.21263): 2 clusters of 16 workers, PP 8 x DP 2."""
PAPER_LINK_MBIT = 1000.0
PAPER_SPEEDUP = 357.0
"""The paper's reported speedup of DiLoCoX over AllReduce for the 107B model at 1 Gbps."""


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """How long each part runs."""

    outer_steps: int
    """T of the convergence runs."""
    inner_steps: int
    """H of every DiLoCo/DiLoCoX run (convergence and link)."""
    link_outer_steps: int
    """Outer steps of DiLoCoX (with and without overlap) on the link."""
    link_diloco_outer_steps: int
    link_allreduce_inner_steps: int
    """The AllReduce baseline on the link: one outer step of this many inner steps."""
    timeout_s: float


QUICK = Schedule(
    outer_steps=8,
    inner_steps=25,
    link_outer_steps=4,
    link_diloco_outer_steps=2,
    link_allreduce_inner_steps=3,
    timeout_s=600,
)
FULL = Schedule(
    outer_steps=40,
    inner_steps=25,
    link_outer_steps=8,
    link_diloco_outer_steps=3,
    link_allreduce_inner_steps=5,
    timeout_s=3600,
)


@dataclass(frozen=True, kw_only=True)
class CommBenchConfig:
    quick: bool = False
    clusters: int = 2
    bandwidth_mbit: float | None = None
    """None: derived from the paper's setting (module docstring)."""
    delay_ms: float = 0.0
    """One-way delay per direction (netem); needs a kernel with netem."""
    shaping: Literal["auto", "netns-tc", "software"] = "auto"
    preset: str = "tiny"
    outer_steps: int | None = None
    inner_steps: int | None = None
    seed: int = 0
    rank: int | None = None
    """DiLoCoX's low-rank rank; None: the preset's."""
    bits: int | None = None
    """DiLoCoX's bits per factor element (2, 4, 8, 16, 32); None: the preset's."""
    dense_bits: int | None = None
    """DiLoCoX's bits per element of the tensors sent whole (8, 16); None: the preset's."""
    exchange: Literal["all-gather", "owner-reduce"] | None = None
    """How DiLoCoX combines the payloads (``OuterConfig.exchange``); None: ``"auto"`` -- the
    all-gather at 2 clusters, the owner-reduce from 3, whose bytes per cluster do not grow with
    C (the result's ``exchange`` says which ran). ``owner-reduce`` turns the contribution
    scores off, as it must."""
    plots: Path | None = None
    workdir: Path | None = None
    data_dir: Path | None = None
    custom_schedule: Schedule | None = None
    """Replaces the quick/full schedule (tests use a tiny one)."""

    @property
    def schedule(self) -> Schedule:
        base = self.custom_schedule or (QUICK if self.quick else FULL)
        return replace(
            base,
            outer_steps=self.outer_steps or base.outer_steps,
            inner_steps=self.inner_steps or base.inner_steps,
        )

    def __post_init__(self) -> None:
        if self.clusters < 2:
            raise BenchError(
                f"expected at least 2 clusters to compare communication, got {self.clusters}"
            )
        if self.bandwidth_mbit is not None and not self.bandwidth_mbit > 0:
            raise BenchError(f"expected a bandwidth > 0 Mbit/s, got {self.bandwidth_mbit}")


@dataclass(frozen=True)
class CommBenchResult:
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return self.data

    def lines(self) -> list[str]:
        d, methods = self.data, self.data["methods"]
        derivation = d["link_derivation"]
        measured = (
            f", measured {d['link_measured_mbit']:.3g} Mbit/s" if d["link_measured_mbit"] else ""
        )
        modified = d.get("trainer_outer_modified") or []
        dirty = f" (modified: {', '.join(modified)})" if modified else ""
        out = [
            f"comm: {d['clusters']} clusters x {d['stages']} "
            f"stages, {d['parameters']:,} parameters, DiLoCoX {d['exchange']}, "
            f"commit {d['commit']}{dirty}",
            f"link: {d['link_mbit']:.3g} Mbit/s ({d['shaping']}{measured})",
            f"held-out loss over {d['eval_tokens']:,} tokens",
        ]
        out += [f"  {line}" for line in derivation.get("explanation", [])]
        out.append(
            f"  {'method':26} {'final loss':>10} "
            f"{'bytes/token':>12} {'tokens/s':>10} {'speedup':>8} "
            f"{'exposed s/step':>14} {'utilisation':>11}"
        )
        for name in ("allreduce", "diloco", "dilocox", "dilocox-blocking"):
            m = methods.get(name)
            if m is None:
                continue
            loss = f"{m['final_eval_loss']:.4f}" if "final_eval_loss" in m else "-"
            per_token = f"{m['bytes_per_token']:.4g}" if "bytes_per_token" in m else "-"
            out.append(
                f"  {name:26} {loss:>10} {per_token:>12} {m.get('tokens_per_s', 0):>10,.0f} "
                f"{m.get('speedup_over_allreduce', 0):>8.1f} "
                f"{m.get('exposed_comm_s_per_outer_step', 0):>14.3f} "
                f"{m.get('compute_utilisation', 0):>11.1%}"
            )
        for name, target in d["targets"].items():
            relation = "<=" if name == "loss_gap" else ">="
            out.append(
                f"  {name:24} {target['value']:10.4g}   target {relation} {target['target']:g}: "
                f"{'met' if target['met'] else 'MISSED'}"
            )
        return out


def run_comm_bench(
    config: CommBenchConfig, *, say: Callable[[str], None] = lambda _: None
) -> CommBenchResult:
    schedule = config.schedule
    base = bench_base(config)
    dilocox = method_config(base, "dilocox").outer
    data_dir = config.data_dir or default_data_dir()
    base = whole_held_out(base, prepare_data(base.data, data_dir).manifest)
    parameters = base.model.parameter_count()
    with scratch_dir(config.workdir, prefix="veritrain-bench-comm-") as workdir:
        started = time.monotonic()
        say(
            f"convergence at equal tokens ({base.clusters} "
            f"clusters x {base.stages} stages, {config.preset})"
        )
        convergence = run_convergence(
            base, ("allreduce", "diloco", "dilocox"), data_dir=data_dir, workdir=workdir, say=say
        )
        derivation = _link_derivation(config, base, convergence["allreduce"])
        rate = float(derivation["link_mbit"])
        shaping = _choose_shaping(config)
        say(f"link {rate:.3g} Mbit/s with {shaping} shaping")
        with _link(shaping, base.clusters, rate, config.delay_ms, workdir) as (setup, measured):
            if measured is not None:
                say(f"  preflight: the link carries {measured:.3g} Mbit/s")
            runs = plan_link_runs(base, schedule)
            link_runs = run_on_link(
                runs,
                setup,
                data_dir=data_dir,
                workdir=workdir / "link",
                timeout_s=link_time_limit(runs, parameters, rate, schedule.timeout_s),
            )
        data = assemble(
            convergence=convergence,
            link_runs=link_runs,
            parameters=parameters,
            clusters=base.clusters,
            owner_reduce=dilocox.owner_reduce,
            link=LinkReport(
                shaping=shaping,
                link_mbit=rate,
                measured_mbit=measured,
                delay_ms=config.delay_ms,
                derivation=derivation,
            ),
        )
        data.update(
            {
                "stages": base.stages,
                "preset": config.preset,
                "eval_tokens": eval_tokens(base),
                "schedule": {
                    "outer_steps": schedule.outer_steps,
                    "inner_steps": schedule.inner_steps,
                    "link_outer_steps": schedule.link_outer_steps,
                    "link_diloco_outer_steps": schedule.link_diloco_outer_steps,
                    "link_allreduce_inner_steps": schedule.link_allreduce_inner_steps,
                },
                "exchange": dilocox.exchange_in_use,
                "dilocox_outer_config": dilocox.to_dict(),
                **_code_state(),
                "seconds": time.monotonic() - started,
            }
        )
        if config.plots is not None:
            data["plots"] = [str(p) for p in _plots(data, config.plots)]
    return CommBenchResult(data)


def bench_base(config: CommBenchConfig) -> TrainConfig:
    """The run every method trains: the preset at the bench's clusters, schedule and seed, with
    the DiLoCoX options that were given. Without ``--exchange`` the bench asks for ``"auto"``,
    which resolves from the clusters (the all-gather at 2, the owner-reduce from 3); the
    trainer's default is the all-gather at any C (``OuterConfig.exchange``)."""
    schedule = config.schedule
    preset = run_preset(config.preset)
    base = replace(
        preset,
        clusters=config.clusters,
        outer_steps=schedule.outer_steps,
        inner_steps=schedule.inner_steps,
        seed=config.seed,
    )
    if config.rank is not None:
        base = replace(base, outer=base.outer.with_rank(config.rank))
    if config.bits is not None:
        base = replace(base, outer=replace(base.outer, bits=config.bits))  # type: ignore[arg-type]  # OuterConfig checks it
    if config.dense_bits is not None:
        base = replace(base, outer=replace(base.outer, dense_bits=config.dense_bits))  # type: ignore[arg-type]
    scores = base.outer.anomaly_scores
    if config.exchange == "owner-reduce" and scores:
        scores = False  # no cluster holds a whole contribution to score
    exchange = config.exchange or "auto"
    return replace(base, outer=replace(base.outer, exchange=exchange, anomaly_scores=scores))


def _link_derivation(
    config: CommBenchConfig, base: TrainConfig, allreduce: list[StepMetrics]
) -> dict[str, Any]:
    """The paper setting's communication share (planner), and the link that gives our
    AllReduce run the same share."""
    paper = plan(
        MODEL_PRESETS[PAPER_MODEL], placement=PAPER_PLACEMENT, link_mbit=PAPER_LINK_MBIT
    ).comm
    fraction = paper.allreduce_comm_fraction
    bytes_per_step = allreduce_bytes_per_outer_step(
        parameters=base.model.parameter_count(), n_clusters=base.clusters, inner_steps=1
    )
    compute = compute_per_inner_step(allreduce)
    derived = bandwidth_for_comm_fraction(
        bytes_per_step=bytes_per_step, compute_seconds_per_step=compute, fraction=fraction
    )
    link = config.bandwidth_mbit or derived
    explanation = [
        f"paper setting ({PAPER_MODEL}, C={PAPER_PLACEMENT.clusters} S={PAPER_PLACEMENT.stages} "
        f"D={PAPER_PLACEMENT.data_parallel}, {PAPER_LINK_MBIT:g} Mbit/s): AllReduce sends "
        f"{paper.allreduce_bytes_per_inner_step / 1e9:,.1f} GB per inner step = "
        f"{paper.allreduce_comm_seconds_per_inner_step:,.0f} s, "
        f"computes {paper.compute_seconds_per_inner_step:.1f} s "
        f"({paper.tokens_per_inner_step:,} tokens per "
        "cluster at the planner's MFU) -> communicating "
        f"{fraction:.2%} of the time (the paper's reported "
        f"{PAPER_SPEEDUP:g}x would imply >= {1 - 1 / PAPER_SPEEDUP:.2%})",
        f"here: AllReduce sends {bytes_per_step / 1e6:.3f} MB "
        f"per inner step and computes {compute * 1000:.1f} ms "
        f"-> {derived:.3g} Mbit/s gives the same share"
        + (
            ""
            if config.bandwidth_mbit is None
            else f"; --bandwidth {config.bandwidth_mbit:g} used instead"
        ),
    ]
    return {
        "link_mbit": link,
        "given": config.bandwidth_mbit is not None,
        "paper_comm_fraction": fraction,
        "paper_allreduce_seconds_per_inner_step": paper.allreduce_comm_seconds_per_inner_step,
        "paper_compute_seconds_per_inner_step": paper.compute_seconds_per_inner_step,
        "paper_reported_speedup": PAPER_SPEEDUP,
        "allreduce_bytes_per_inner_step": bytes_per_step,
        "allreduce_compute_seconds_per_inner_step": compute,
        "derived_link_mbit": derived,
        "explanation": explanation,
    }


def _choose_shaping(config: CommBenchConfig) -> Shaping:
    reason = netns_unavailable()
    if config.shaping == "software":
        return "software"
    if reason is None:
        if config.delay_ms > 0 and not netem_available():
            raise BenchError(
                "expected the netem qdisc for --delay-ms, "
                "this kernel has none (CONFIG_NET_SCH_NETEM)"
            )
        return "netns-tc"
    if config.shaping == "netns-tc":
        raise BenchError(f"expected to create network namespaces for netns-tc shaping: {reason}")
    if config.delay_ms > 0:
        raise BenchError(f"--delay-ms needs netns-tc shaping, which is unavailable here: {reason}")
    return "software"


@contextmanager
def _link(
    shaping: Shaping, clusters: int, rate: float, delay_ms: float, workdir: Path
) -> Iterator[tuple[LinkSetup, float | None]]:
    if shaping == "software":
        folder = workdir / "software-link"
        folder.mkdir(parents=True, exist_ok=True)
        yield (
            LinkSetup(shaping="software", rate_mbit=rate, delay_ms=0.0, software_folder=folder),
            None,
        )
        return
    with emulated_link(clusters, rate_mbit=rate, delay_ms=delay_ms) as netns:
        measured = measure_link(netns, seconds=2.0)
        yield (
            LinkSetup(shaping="netns-tc", rate_mbit=rate, delay_ms=delay_ms, netns=netns),
            measured,
        )


def measure_link(netns: NetnsLink, *, seconds: float) -> float:
    """Send ``seconds`` worth of bytes from cluster 1 to cluster 0 over TCP and return the
    receiver's measured rate in Mbit/s (link_probe.py)."""
    receiver, sender = netns.clusters[0], netns.clusters[1]
    port = "29400"
    probe = [sys.executable, "-m", "veritrain.bench.link_probe"]
    listening = subprocess.Popen(
        ["ip", "netns", "exec", receiver.namespace, *probe, "receive", receiver.address, port],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert listening.stdout is not None  # stdout=PIPE
        if listening.stdout.readline().strip() != "listening":
            raise BenchError(
                "expected the link probe to listen in cluster 0's namespace, it did not"
            )
        nbytes = int(netns.rate_mbit * 1e6 / 8 * seconds)
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                sender.namespace,
                *probe,
                "send",
                receiver.address,
                port,
                str(nbytes),
            ],
            check=True,
            timeout=seconds * 10 + 30,
        )
        measured: float = json.loads(listening.stdout.readline())["mbit_per_s"]
        return measured
    finally:
        if listening.poll() is None:
            listening.kill()
        listening.wait()


def link_time_limit(
    runs: Sequence[LinkRun], parameters: int, link_mbit: float, compute_s: float
) -> float:
    """How long the link runs may take: ``compute_s`` (the schedule's limit) plus twice the time
    the link needs for the most bytes the runs can send -- AllReduce's gradients every inner
    step, and a dense fp32 payload per outer step for DiLoCo and DiLoCoX (an upper bound:
    DiLoCoX compresses it). A fixed limit failed at qwen2-12m, where AllReduce alone needs
    ~255 s an inner step on the 1.68 Mbit/s link the bench derives."""
    wire = 0.0
    for run in runs:
        c = run.config
        if c.method == "allreduce":
            wire += c.outer_steps * allreduce_bytes_per_outer_step(
                parameters=parameters, n_clusters=c.clusters, inner_steps=c.inner_steps
            )
        else:
            wire += c.outer_steps * allgather_bytes_per_outer_step(
                payload_bytes=4 * parameters, n_clusters=c.clusters
            )
    return compute_s + 2.0 * wire * 8 / (link_mbit * 1e6)


def plan_link_runs(base: TrainConfig, schedule: Schedule) -> list[LinkRun]:
    """The runs made on the shaped link, in order: AllReduce, DiLoCo, DiLoCoX and DiLoCoX
    without overlap, each sized by ``schedule`` (``link_time_limit`` gives them their time)."""

    def config(
        method: Literal["allreduce", "diloco", "dilocox"], outer_steps: int, inner_steps: int
    ) -> TrainConfig:
        # One held-out batch per outer step: every method still evaluates, as in training, but
        # the throughput measures training more than evaluation.
        return replace(
            method_config(base, method),
            outer_steps=outer_steps,
            inner_steps=inner_steps,
            eval_batches=1,
        )

    dilocox = config("dilocox", schedule.link_outer_steps, schedule.inner_steps)
    return [
        LinkRun("allreduce", config("allreduce", 1, schedule.link_allreduce_inner_steps)),
        LinkRun("diloco", config("diloco", schedule.link_diloco_outer_steps, schedule.inner_steps)),
        LinkRun("dilocox", dilocox),
        LinkRun(
            "dilocox-blocking",
            replace(
                dilocox,
                run_id="bench-dilocox-blocking",
                outer=replace(dilocox.outer, overlap=False),
            ),
        ),
    ]


def _plots(data: dict[str, Any], directory: Path) -> list[Path]:
    from veritrain.bench.plots import write_plots

    return write_plots(data, directory)


def _code_state() -> dict[str, Any]:
    """The commit measured, and which files that decide what DiLoCoX ran with (the outer
    algorithm, the presets' settings) differed from it."""
    here = Path(__file__).resolve().parent

    def git(*args: str) -> str:
        completed = subprocess.run(
            ["git", *args], capture_output=True, text=True, check=False, cwd=here
        )
        return completed.stdout

    status = git("status", "--porcelain", "--", "../../trainer/outer", "../../trainer/presets.py")
    return {
        "commit": git("rev-parse", "--short", "HEAD").strip() or "unknown",
        "trainer_outer_modified": porcelain_paths(status),
    }


def porcelain_paths(status: str) -> list[str]:
    """The paths of ``git status --porcelain`` (v1) output: each line is two status columns, a
    space and the path, and the first column is a space for a change not staged -- so the
    output must not be stripped before it is split (a stripped first line lost a character)."""
    return [line[3:] for line in status.splitlines() if line.strip()]
