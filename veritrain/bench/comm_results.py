"""From measured steps to the numbers ``veritrain bench comm`` reports. Pure functions.

Definitions (the ``--json`` fields):

* ``bytes_ratio``: bytes one cluster sends between clusters over the whole convergence run,
  AllReduce ÷ DiLoCoX, at equal tokens. Both from trainer/outer/accounting.py: AllReduce
  ``2(C−1)/C · 4 · params · H`` per outer step, DiLoCo/X ``(C−1) · payload`` per applied round.
* ``loss_gap``: (DiLoCoX − AllReduce) ÷ AllReduce of the final held-out loss.
* ``speedup``: DiLoCoX ÷ AllReduce tokens/s on the emulated link, in steady state: a run's
  last outer step is left out when it has at least three (under the one-step delay the last
  step also waits for its own exchange -- once per run, however long the run).
* ``exposed_comm_reduction``: 1 − overlapped ÷ blocking exposed communication seconds per
  outer step (DiLoCoX with and without the one-step delay, same compression, same link).
* ``compute_utilisation``: the compute a method's inner steps need (seconds per inner step
  measured without a link, in its convergence run) ÷ its wall time on the link.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainer.outer.accounting import allgather_bytes_per_outer_step, allreduce_bytes_per_outer_step
from veritrain.bench.metrics_recorder import StepMetrics
from veritrain.errors import BenchError

TARGETS = {"bytes_ratio": 1000.0, "loss_gap": 0.08, "speedup": 100.0, "exposed_comm_reduction": 0.7}
"""Issue #7's acceptance targets (loss_gap is an upper bound, the others lower bounds)."""


@dataclass(frozen=True, kw_only=True)
class LinkReport:
    shaping: str
    """``netns-tc`` or ``software``."""
    link_mbit: float
    measured_mbit: float | None
    """What the preflight transfer measured across the link (None: not measured)."""
    delay_ms: float
    derivation: Mapping[str, Any]
    """How the link was chosen (planner numbers), or that it was given."""


def bytes_sent(
    steps: Sequence[StepMetrics], *, parameters: int, clusters: int, measured: bool = False
) -> float:
    """Bytes one cluster put on the inter-cluster link over ``steps`` (accounting.py); with
    ``measured`` (the owner-reduce exchange, which counts what it sends) the mean over the
    clusters of what their processes reported."""
    total = 0.0
    for step in steps:
        if measured:
            total += step.metrics["bytes_sent_all_clusters"] / clusters
        elif step.method == "allreduce":
            total += allreduce_bytes_per_outer_step(
                parameters=parameters, n_clusters=clusters, inner_steps=step.inner_steps
            )
        else:
            total += sum(
                allgather_bytes_per_outer_step(payload_bytes=p, n_clusters=clusters)
                for p in step.payload_bytes
            )
    return total


def tokens(steps: Sequence[StepMetrics]) -> float:
    return sum(s.metrics["step_tokens"] for s in steps)


def final_eval_loss(steps: Sequence[StepMetrics]) -> float:
    if not steps or "eval_loss" not in steps[-1].metrics:
        raise BenchError("expected a held-out loss in the run's last step, found none")
    return steps[-1].metrics["eval_loss"]


def steady(steps: Sequence[StepMetrics]) -> list[StepMetrics]:
    """The steps that represent a long run: all but the last when there are three or more."""
    return list(steps[:-1]) if len(steps) >= 3 else list(steps)


def tokens_per_second(steps: Sequence[StepMetrics]) -> float:
    window = steady(steps)
    return tokens(window) / sum(s.metrics["wall_seconds"] for s in window)


def exposed_per_outer_step(steps: Sequence[StepMetrics]) -> float:
    window = steady(steps)
    return sum(s.metrics["exposed_comm_seconds"] for s in window) / len(window)


def compute_per_inner_step(steps: Sequence[StepMetrics]) -> float:
    """Seconds of computation per inner step (all steps but the first, which warms up)."""
    window = steps[1:] if len(steps) > 1 else steps
    return sum(s.metrics["compute_seconds"] for s in window) / sum(s.inner_steps for s in window)


def compute_utilisation(link_steps: Sequence[StepMetrics], compute_per_step: float) -> float:
    window = steady(link_steps)
    return (
        compute_per_step
        * sum(s.inner_steps for s in window)
        / sum(s.metrics["wall_seconds"] for s in window)
    )


def assemble(
    *,
    convergence: Mapping[str, Sequence[StepMetrics]],
    link_runs: Mapping[str, Sequence[StepMetrics]],
    parameters: int,
    clusters: int,
    link: LinkReport,
    owner_reduce: bool = False,
) -> dict[str, Any]:
    """The whole ``--json`` object. ``convergence`` holds allreduce, diloco and dilocox;
    ``link_runs`` the same plus ``dilocox-blocking`` (DiLoCoX without the overlap)."""
    for name in ("allreduce", "dilocox"):
        if name not in convergence or name not in link_runs:
            raise BenchError(f"expected {name!r} in both the convergence and the link runs")
    if "dilocox-blocking" not in link_runs:
        raise BenchError("expected a 'dilocox-blocking' link run to measure the overlap against")
    methods: dict[str, dict[str, Any]] = {}
    for name, steps in convergence.items():
        sent = bytes_sent(
            steps,
            parameters=parameters,
            clusters=clusters,
            measured=owner_reduce and name == "dilocox",
        )
        methods[name] = {
            "final_eval_loss": final_eval_loss(steps),
            "tokens": tokens(steps),
            "bytes_sent": sent,
            "bytes_per_token": sent / tokens(steps),
            "curve": [
                {
                    "step": s.step,
                    "tokens": s.metrics["tokens"],
                    "eval_loss": s.metrics.get("eval_loss"),
                    "train_loss": s.metrics.get("train_loss"),
                }
                for s in steps
            ],
            "compute_seconds_per_inner_step": compute_per_inner_step(steps),
        }
    for name, steps in link_runs.items():
        entry = methods.setdefault(name, {})
        reference = methods.get(name.removesuffix("-blocking"), {}).get(
            "compute_seconds_per_inner_step"
        )
        entry.update(
            {
                "tokens_per_s": tokens_per_second(steps),
                "exposed_comm_s_per_outer_step": exposed_per_outer_step(steps),
                "comm_s_per_outer_step": sum(s.metrics["comm_seconds"] for s in steady(steps))
                / len(steady(steps)),
                "link_outer_steps": len(steps),
                "link_inner_steps": steps[0].inner_steps if steps else 0,
            }
        )
        if reference is not None:
            entry["compute_utilisation"] = compute_utilisation(steps, reference)
    allreduce, dilocox = methods["allreduce"], methods["dilocox"]
    blocking_exposed = methods["dilocox-blocking"]["exposed_comm_s_per_outer_step"]
    for name in methods:
        if "tokens_per_s" in methods[name]:
            methods[name]["speedup_over_allreduce"] = (
                methods[name]["tokens_per_s"] / allreduce["tokens_per_s"]
            )
    result: dict[str, Any] = {
        "bytes_ratio": allreduce["bytes_sent"] / dilocox["bytes_sent"],
        "loss_gap": (dilocox["final_eval_loss"] - allreduce["final_eval_loss"])
        / allreduce["final_eval_loss"],
        "speedup": dilocox["tokens_per_s"] / allreduce["tokens_per_s"],
        "exposed_comm_reduction": (
            1.0 - dilocox["exposed_comm_s_per_outer_step"] / blocking_exposed
            if blocking_exposed > 0
            else 0.0
        ),
        "shaping": link.shaping,
        "link_mbit": link.link_mbit,
        "link_measured_mbit": link.measured_mbit,
        "link_delay_ms": link.delay_ms,
        "link_derivation": dict(link.derivation),
        "clusters": clusters,
        "parameters": parameters,
        "methods": methods,
    }
    result["targets"] = targets_met(result)
    return result


def targets_met(result: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    met = {}
    for name, target in TARGETS.items():
        value = float(result[name])
        met[name] = {
            "target": target,
            "value": value,
            "met": value <= target if name == "loss_gap" else value >= target,
        }
    return met
