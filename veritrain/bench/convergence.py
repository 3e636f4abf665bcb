"""Convergence at equal tokens: the real trainer, one run per method, nothing shaped.

Each method trains the same configuration -- model, data order, seed, topology, T outer steps
of H inner steps, so the same token budget -- with ``trainer.api.train`` on this host's
spawned processes, recording only metrics (metrics_recorder.py). The link does not change
what is computed (adaptive H is off in these runs), so losses and bytes are measured here at
full speed and the emulated link is needed only for throughput.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from trainer.api import train
from trainer.config import Method, TrainConfig, with_overrides
from veritrain.bench.metrics_recorder import MetricsRecorderFactory, StepMetrics, read_steps
from veritrain.errors import BenchError


def method_config(base: TrainConfig, method: Method) -> TrainConfig:
    """``base`` for ``method``, its outer settings (the preset's) otherwise untouched."""
    config = with_overrides(base, method=method, run_id=f"bench-{method}")
    return replace(config, outer=replace(config.outer, adaptive_inner_steps=False))


def run_convergence(
    base: TrainConfig,
    methods: Sequence[Method],
    *,
    data_dir: Path,
    workdir: Path,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, list[StepMetrics]]:
    """Train ``base`` once per method; each run's steps by method."""
    traces: dict[str, list[StepMetrics]] = {}
    for method in methods:
        config = method_config(base, method)
        say(f"  {method}: {config.outer_steps} x {config.inner_steps} inner steps")
        path = workdir / f"convergence-{method}.jsonl"
        train(config, MetricsRecorderFactory(path), data_dir=data_dir, quiet=True)
        steps = read_steps(path)
        if len(steps) != config.outer_steps:
            raise BenchError(
                f"expected {config.outer_steps} recorded "
                f"steps from the {method} run, got {len(steps)}"
            )
        traces[method] = steps
    return traces
