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

from records.data_manifest import DataManifest
from trainer.api import assignment_rule, train
from trainer.config import Method, TrainConfig, with_overrides
from veritrain.bench.metrics_recorder import MetricsRecorderFactory, StepMetrics, read_steps
from veritrain.errors import BenchError


def method_config(base: TrainConfig, method: Method) -> TrainConfig:
    """``base`` for ``method``, its outer settings (the preset's) otherwise untouched."""
    config = with_overrides(base, method=method, run_id=f"bench-{method}")
    return replace(config, outer=replace(config.outer, adaptive_inner_steps=False))


def whole_held_out(config: TrainConfig, manifest: DataManifest) -> TrainConfig:
    """``config`` evaluating on every held-out window of ``manifest`` (as many whole batches as
    they fill), not the preset's first ``eval_batches``.

    The held-out loss is what the loss gap is read from. The trainer evaluates the first windows
    in order (assignment.py, rule 5); at ``tiny`` its 4 batches are 2,048 consecutive bytes of one
    stdlib module, a sample on which one method's luck with one file moves the gap by points.
    Every held-out window (``tiny``: 504 of its 510, 32,256 tokens over both held-out shards) makes
    the comparison one over the held-out distribution (docs/benchmarks.md, "The held-out set")."""
    rule = assignment_rule(config, manifest)
    return replace(config, eval_batches=max(1, rule.eval_windows // rule.sequences_per_step))


def eval_tokens(config: TrainConfig) -> int:
    """Tokens of held-out text each evaluation of ``config`` reads."""
    return config.eval_batches * config.sequences_per_step * config.model.context


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
