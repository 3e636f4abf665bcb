"""The short overlap (issue #24): DiLoCoX's exchange hidden behind τ inner steps, not a round.

DiLoCoX's one-step-delay overlap hides round t's exchange behind the whole of round t+1: every
round starts from a look-ahead guess of θ, which costs 2.5-2.8 points of loss gap at
``bench comm --quick`` (docs/benchmarks.md, "The held-out set"). The exchange itself takes
0.18-0.24 s there, about three inner steps. Streaming DiLoCo (Douillard et al. 2025,
arXiv 2501.18512, "overlapping communication") applies the update τ inner steps late instead:
the clusters go on training from where round t ended, and when round t's mean arrives each
cluster moves to θₜ₊₁ (minus its error-feedback residual, as blocking DiLoCoX does) and keeps
the progress of those τ steps on top. The next pseudo-gradient is measured from θₜ₊₁, so it
carries them.

This is research code: a single-process simulation with the trainer's inner step and the
product's own ``OuterLoop`` (blocking), in the call order above. ``τ = 0`` is blocking DiLoCoX
exactly (tests/unit/research/test_research_short_overlap.py). The runtime, the records and
``veritrain verify`` do not know this schedule.

From the repository root (the ``tiny`` preset at ``bench comm --quick``'s rounds, the whole
held-out set)::

    python -m research.short_overlap --tau 0 1 3 7 --seed 0 1 2
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import replace

import torch

from trainer.api import assignment_rule, default_data_dir
from trainer.data.build import prepare_data
from trainer.data.reader import BatchReader
from trainer.errors import ConfigError
from trainer.model import CausalLM
from trainer.outer import Gathered, OuterLoop, RoundSignals
from trainer.presets import run_preset
from trainer.runtime.inner import inner_adamw, learning_rate
from veritrain.bench.convergence import whole_held_out
from veritrain.bench.simulate import (
    Batch,
    Batches,
    SimulationConfig,
    clone_model,
    cluster_loops,
    evaluate,
)
from veritrain.bench.simulate import inner_step as take_inner_step


def short_overlap_loss(
    config: SimulationConfig, *, tau: int, batches: Batches, eval_batches: Sequence[Batch]
) -> float:
    """Held-out loss of θ after ``config``'s rounds when round t's update is applied ``tau``
    inner steps into round t+1 (the last round's at its end). ``config.outer`` must be blocking:
    the delay is this function's, not the outer algorithm's."""
    if config.method == "allreduce" or config.outer.overlapped:
        raise ConfigError("expected a blocking DiLoCo or DiLoCoX configuration")
    rounds = config.rounds()
    if not 0 <= tau < min(rounds[1:], default=1):
        raise ConfigError(f"expected 0 <= tau < the shortest later round, got {tau}")
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(config.seed)
    reference = CausalLM(config.model, seed=config.seed)
    cpu = torch.device("cpu")
    models = [clone_model(reference, cpu) for _ in range(config.n_clusters)]
    optimizers = [inner_adamw(m.parameters(), config.inner) for m in models]
    loops = cluster_loops(config, models)
    ends = {sum(rounds[: t + 1]): t for t in range(len(rounds))}
    pending: tuple[int, list[torch.Tensor], list[list[torch.Tensor]], int] | None = None
    losses: list[float] = []
    for step in range(config.total_steps):
        lr = learning_rate(config.inner, step, config.total_steps)
        for cluster, (model, optimizer) in enumerate(zip(models, optimizers, strict=True)):
            losses.append(
                take_inner_step(model, optimizer, batches(cluster, step), lr, config.inner)
            )
        done = step + 1
        if (pending is None or done != pending[3]) and done not in ends:
            continue
        locals_ = [[p.data for p in m.parameters()] for m in models]
        signals = RoundSignals(mean_train_loss=sum(losses) / max(1, len(losses)))
        if pending is not None and done == pending[3]:
            round, payloads, sent_from, _ = pending
            progress = [
                [now - then for now, then in zip(local, sent, strict=True)]
                for local, sent in zip(locals_, sent_from, strict=True)
            ]
            _apply(loops, round, payloads, locals_, signals)
            for local, moved in zip(locals_, progress, strict=True):
                for parameter, delta in zip(local, moved, strict=True):
                    parameter.add_(delta)
            pending = None
        if done in ends:
            round = ends[done]
            payloads = [
                loop.contribution(round, local).payload
                for loop, local in zip(loops, locals_, strict=True)
            ]
            losses = []
            if tau == 0 or round == len(rounds) - 1:
                _apply(loops, round, payloads, locals_, signals)
            else:
                sent_from = [[p.clone() for p in local] for local in locals_]
                pending = (round, payloads, sent_from, done + tau)
    return evaluate(config.model, loops[0].global_parameters(), eval_batches, device=cpu)


def _apply(
    loops: Sequence[OuterLoop],
    round: int,
    payloads: list[torch.Tensor],
    locals_: Sequence[Sequence[torch.Tensor]],
    signals: RoundSignals,
) -> None:
    for loop, local in zip(loops, locals_, strict=True):
        loop.apply(round, Gathered(payloads), local, signals)


def _tiny_quick(tau: int, seed: int) -> float:
    """The ``tiny`` preset's DiLoCoX, blocking, at ``bench comm --quick``'s rounds."""
    torch.set_num_threads(1)
    preset = run_preset("tiny")
    base = replace(preset, seed=seed, outer_steps=8, inner_steps=25)
    prepared = prepare_data(base.data, default_data_dir())
    base = whole_held_out(base, prepared.manifest)  # the held-out set bench comm reads
    reader = BatchReader(
        prepared.manifest, assignment_rule(base, prepared.manifest), prepared.source
    )
    simulation = SimulationConfig(
        model=base.model,
        method="dilocox",
        outer=replace(base.outer, kind="dilocox", overlap=False),
        n_clusters=base.clusters,
        inner_steps=base.inner_steps,
        total_steps=base.planned_inner_steps,
        round_steps=base.round_inner_steps(),
        inner=base.inner,
        seed=seed,
    )
    return short_overlap_loss(
        simulation,
        tau=tau,
        batches=reader.train_batch,
        eval_batches=reader.eval_batches(base.eval_batches),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tau", type=int, nargs="+", default=[0, 3])
    parser.add_argument("--seed", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    for seed in args.seed:
        for tau in args.tau:
            loss = _tiny_quick(tau, seed)
            print(json.dumps({"tau": tau, "seed": seed, "final_loss": loss}), flush=True)
            if not math.isfinite(loss):
                raise SystemExit(f"seed {seed}, tau {tau}: the run diverged")


if __name__ == "__main__":
    main()
