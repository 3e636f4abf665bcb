"""Streaming DiLoCo's levers on blocking DiLoCoX (issue #24): fragments, a short overlap and an
outer learning-rate schedule.

Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512) changes DiLoCo in two ways, and this
script simulates both on the product's own ``OuterLoop`` (blocking DiLoCoX) with the trainer's
inner step:

* **Fragments** (its §2.2, "streaming synchronization"). The parameters are split into P
  fragments of transformer blocks, strided (fragment p holds the blocks i with i mod P = p; here
  the token embedding goes with fragment 0 and the final norm with fragment P−1), and each
  fragment is exchanged on its own schedule, staggered so that the fragments' exchanges do not
  coincide. Every fragment still has T rounds, so the bytes of a run are the same; the peak
  per exchange is 1/P of it. Each fragment here has its own ``OuterLoop`` (its own outer
  momentum, bases and error-feedback residual, as each stage shard has in the trainer), and
  fragment p's round boundaries are the preset's, ``p·h/P`` inner steps earlier (h: the
  shortest round after the first), except the run's last, where every fragment ends.
* **A short overlap** (its §2.3, "overlapping communication"). DiLoCoX's one-step-delay overlap
  hides round t's exchange behind the whole of round t+1: every round starts from a look-ahead
  guess of θ, which costs 2.5-2.8 points of loss gap at ``bench comm --quick``
  (docs/benchmarks.md, "The held-out set"). The exchange itself takes 0.18-0.24 s there, about
  three inner steps. Applied τ inner steps late instead, the clusters go on training from where
  round t ended, and when round t's mean arrives each cluster moves to θₜ₊₁ (minus its
  error-feedback residual, as blocking DiLoCoX does) and keeps the progress of those τ steps on
  top. The next pseudo-gradient is measured from θₜ₊₁, so it carries them.

and a lever the issue names that neither paper schedules: **the outer learning rate over the
rounds** (DiLoCo keeps 0.7 constant): a cosine from the preset's outer lr at round 0 to
``outer_lr_end`` at the last round.

This is research code: one process, the trainer's inner step, the product's ``OuterLoop``. With
one fragment, no delay and a constant outer lr it is the simulator's blocking DiLoCoX to the last
bit (tests/unit/research/test_research_streaming.py). The runtime, the records and ``veritrain
verify`` know none of these schedules.

From the repository root (the ``tiny`` preset at ``bench comm --quick``'s rounds, the whole
held-out set; one JSON line per run)::

    python -m research.streaming --tau 0 3 --fragments 1 2 4 --seed 0 1 2
    python -m research.streaming --outer-lr-end 0.35 1.0 --seed 0 1 2
    python -m research.streaming --inner-lr 4e-3 --outer-lr 1.0 --outer-momentum 0 --seed 0 1 2
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from itertools import pairwise

import torch

from trainer.api import assignment_rule, default_data_dir
from trainer.data.build import prepare_data
from trainer.data.reader import BatchReader
from trainer.errors import ConfigError
from trainer.model import CausalLM
from trainer.outer import Gathered, OuterLoop, RoundSignals, build_outer_algorithm
from trainer.outer.config import OuterKind
from trainer.presets import run_preset
from trainer.runtime.inner import inner_adamw, learning_rate
from veritrain.bench.convergence import whole_held_out
from veritrain.bench.simulate import (
    Batch,
    Batches,
    SimulationConfig,
    clone_model,
    evaluate,
)
from veritrain.bench.simulate import inner_step as take_inner_step

_LAYER = re.compile(r"\blayers\.(\d+)\.")


@dataclass(frozen=True, kw_only=True)
class Streaming:
    """How one simulated run streams: the defaults are blocking DiLoCoX."""

    fragments: int = 1
    """P: fragments of strided transformer blocks, each exchanged on its own staggered rounds."""
    tau: int = 0
    """Inner steps between a round's end and the step its update is applied at (0: blocking)."""
    outer_lr_end: float | None = None
    """The outer lr at the last round, reached by a cosine from the configured outer lr at round
    0 (None: constant)."""
    flush: bool = False
    """After the last round, one more exchange with no inner steps: each cluster sends what its
    error feedback still holds (the pseudo-gradient of a round of length 0 is its residual), and
    θ takes the compressed mean with lr 1 and no momentum. One more payload."""


@dataclass(frozen=True, kw_only=True)
class StreamingResult:
    final_loss: float
    """Held-out loss of θ at the end of the run."""
    payload_bytes: int
    """Bytes of every payload one cluster contributed over the run, all fragments."""
    exchanges: int
    """Exchanges one cluster took part in (T per fragment)."""


def fragment_of(name: str, fragments: int) -> int:
    """Streaming DiLoCo's strided fragment of parameter ``name``: block i goes to i mod P; what
    sits before the blocks (the embedding) to fragment 0, after them (the final norm) to P−1."""
    found = _LAYER.search(name)
    if found is not None:
        return int(found.group(1)) % fragments
    return 0 if "embed" in name else fragments - 1


def fragment_ends(rounds: Sequence[int], fragment: int, fragments: int) -> list[int]:
    """The inner steps at which ``fragment``'s rounds end: the rounds' ends, each but the run's
    last ``fragment·h/P`` steps earlier, with h the shortest round after the first."""
    shortest = min(rounds[1:], default=rounds[0])
    shift = fragment * shortest // fragments
    ends = [sum(rounds[: t + 1]) for t in range(len(rounds))]
    return [end - shift for end in ends[:-1]] + ends[-1:]


def streaming_loss(
    config: SimulationConfig,
    streaming: Streaming,
    *,
    batches: Batches,
    eval_batches: Sequence[Batch],
) -> StreamingResult:
    """Train ``config``'s blocking DiLoCo or DiLoCoX with ``streaming``'s fragments, delay and
    outer lr schedule; held-out loss of θ at the end and the bytes sent. A round's update is
    applied ``tau`` inner steps into the next round (the last round's at the run's end).

    With ``config.outer.apply_delay`` set (the trainer's short overlap) the outer loops keep the
    clusters' progress themselves, ``tau`` must equal it, and the warm-up rounds
    (``sync_rounds``) are applied at their end, as the runtime does."""
    product = config.outer.delay_in_use is not None
    if config.method == "allreduce" or (config.outer.overlapped and not product):
        raise ConfigError("expected a blocking DiLoCo or DiLoCoX configuration")
    if product and streaming.tau != config.outer.apply_delay:
        raise ConfigError(
            f"expected tau to equal the configuration's apply_delay "
            f"({config.outer.apply_delay}), got {streaming.tau}"
        )
    rounds = config.rounds()
    if streaming.fragments < 1:
        raise ConfigError(f"expected at least one fragment, got {streaming.fragments}")
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(config.seed)
    reference = CausalLM(config.model, seed=config.seed)
    cpu = torch.device("cpu")
    models = [clone_model(reference, cpu) for _ in range(config.n_clusters)]
    optimizers = [inner_adamw(m.parameters(), config.inner) for m in models]
    names = [name for name, _ in reference.named_parameters()]
    owner = [fragment_of(name, streaming.fragments) for name in names]
    fragments = [
        _Fragment(
            config,
            streaming,
            models,
            [i for i, f in enumerate(owner) if f == fragment],
            fragment_ends(rounds, fragment, streaming.fragments),
        )
        for fragment in range(streaming.fragments)
        if fragment in owner
    ]
    for step in range(config.total_steps):
        lr = learning_rate(config.inner, step, config.total_steps)
        losses = [
            take_inner_step(model, optimizer, batches(cluster, step), lr, config.inner)
            for cluster, (model, optimizer) in enumerate(zip(models, optimizers, strict=True))
        ]
        for fragment in fragments:
            fragment.after_inner_step(step + 1, losses)
    if streaming.flush:
        for fragment in fragments:
            fragment.flush()
    weights: list[torch.Tensor] = [torch.empty(0)] * len(names)
    for fragment in fragments:
        thetas = fragment.loops[0].global_parameters()
        for index, tensor in zip(fragment.indices, thetas, strict=True):
            weights[index] = tensor
    return StreamingResult(
        final_loss=evaluate(config.model, weights, eval_batches, device=cpu),
        payload_bytes=sum(f.payload_bytes for f in fragments),
        exchanges=sum(f.exchanges for f in fragments),
    )


class _Fragment:
    """One fragment's outer loops (one per cluster), its round ends and its update in flight."""

    def __init__(
        self,
        config: SimulationConfig,
        streaming: Streaming,
        models: Sequence[CausalLM],
        indices: list[int],
        ends: list[int],
    ) -> None:
        # Round t's update lands ``tau`` steps after its end, before round t+1 ends (the
        # trainer's rule, ``min(τ, H − 1)`` of round t+1, applies with ``apply_delay``).
        later = [b - a for a, b in pairwise(ends)]
        self.later = later
        self.product = config.outer.delay_in_use is not None
        if streaming.tau < 0 or (not self.product and streaming.tau >= min(later, default=1)):
            raise ConfigError(
                f"expected 0 <= tau < the shortest later round ({min(later, default=1)}), "
                f"got {streaming.tau}"
            )
        self.indices = indices
        self.ends = {end: t for t, end in enumerate(ends)}
        self.last = len(ends) - 1
        self.tau = streaming.tau
        self.outer = config.outer
        self.lr = [
            outer_lr_at(config.outer.lr, streaming.outer_lr_end, t, len(ends))
            for t in range(len(ends))
        ]
        self.params = [[p for i, p in enumerate(m.parameters()) if i in indices] for m in models]
        self.loops: list[OuterLoop] = []
        for cluster, model in enumerate(models):
            named = list(model.named_parameters())
            loop = build_outer_algorithm(
                config.outer,
                named_params=[named[i] for i in indices],
                cluster=cluster,
                n_clusters=config.n_clusters,
                seed=config.seed,
            )
            assert isinstance(loop, OuterLoop)
            self.loops.append(loop)
        self.losses: list[float] = []
        self.pending: tuple[int, list[torch.Tensor], list[list[torch.Tensor]], int] | None = None
        self.payload_bytes = 0
        self.exchanges = 0

    def after_inner_step(self, done: int, losses: Sequence[float]) -> None:
        self.losses.extend(losses)
        due = self.pending is not None and done == self.pending[3]
        if not due and done not in self.ends:
            return
        locals_ = [[p.data for p in params] for params in self.params]
        signals = RoundSignals(mean_train_loss=sum(self.losses) / max(1, len(self.losses)))
        if self.pending is not None and due:
            round, payloads, sent_from, _ = self.pending
            # The trainer's outer loop keeps the progress itself (no ``sent_from`` then).
            progress = (
                [
                    [now - then for now, then in zip(local, sent, strict=True)]
                    for local, sent in zip(locals_, sent_from, strict=True)
                ]
                if sent_from
                else []
            )
            self._apply(round, payloads, locals_, signals)
            for local, moved in zip(locals_, progress, strict=False):
                for parameter, delta in zip(local, moved, strict=True):
                    parameter.add_(delta)
            self.pending = None
        if done in self.ends:
            round = self.ends[done]
            payloads = [
                loop.contribution(round, local).payload
                for loop, local in zip(self.loops, locals_, strict=True)
            ]
            self.payload_bytes += payloads[0].numel()
            self.exchanges += 1
            self.losses = []
            warm_up = self.product and self.outer.synchronous(round)
            delay = 0 if round == self.last else min(self.tau, self.later[round] - 1)
            if delay == 0 or warm_up:
                self._apply(round, payloads, locals_, signals)
            else:
                sent_from = [] if self.product else [[p.clone() for p in x] for x in locals_]
                self.pending = (round, payloads, sent_from, done + delay)

    def flush(self) -> None:
        """Send and apply the residuals after the last round (``Streaming.flush``)."""
        locals_ = [[p.data for p in params] for params in self.params]
        round = self.last + 1
        payloads = [
            loop.contribution(round, local).payload
            for loop, local in zip(self.loops, locals_, strict=True)
        ]
        self.payload_bytes += payloads[0].numel()
        self.exchanges += 1
        for loop in self.loops:
            loop.outer.momentum = 0.0  # the residual is added once; momentum would add a step
        self.lr.append(1.0)
        self._apply(round, payloads, locals_, RoundSignals(mean_train_loss=math.nan))

    def _apply(
        self,
        round: int,
        payloads: list[torch.Tensor],
        locals_: Sequence[Sequence[torch.Tensor]],
        signals: RoundSignals,
    ) -> None:
        for loop, local in zip(self.loops, locals_, strict=True):
            loop.outer.lr = self.lr[round]
            loop.apply(round, Gathered(payloads), local, signals)


def outer_lr_at(start: float, end: float | None, round: int, rounds: int) -> float:
    """Round ``round``'s outer lr: ``start`` throughout, or a cosine from ``start`` at round 0 to
    ``end`` at the last round."""
    if end is None or rounds == 1:
        return start
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * round / (rounds - 1)))


def _tiny(
    streaming: Streaming,
    seed: int,
    rounds: tuple[int, ...] | None = None,
    *,
    outer_steps: int = 8,
    method: OuterKind = "dilocox",
    inner_lr: float | None = None,
    outer_lr: float | None = None,
    outer_momentum: float | None = None,
) -> StreamingResult:
    """The ``tiny`` preset's DiLoCoX (or its outer step on uncompressed DiLoCo), blocking, at
    ``bench comm --quick``'s rounds (T = 8; or ``rounds`` over the same inner steps) or at
    ``outer_steps`` rounds of the preset's shape (40: ``bench comm``'s full schedule); the
    inner peak lr, outer lr and outer momentum are the preset's unless given."""
    torch.set_num_threads(1)
    preset = run_preset("tiny")
    inner = replace(preset.inner, lr=inner_lr or preset.inner.lr)
    outer = replace(
        preset.outer,
        outer_lr=outer_lr or preset.outer.outer_lr,
        outer_momentum=preset.outer.outer_momentum if outer_momentum is None else outer_momentum,
    )
    base = replace(
        preset, seed=seed, outer_steps=outer_steps, inner_steps=25, inner=inner, outer=outer
    )
    prepared = prepare_data(base.data, default_data_dir())
    base = whole_held_out(base, prepared.manifest)  # the held-out set bench comm reads
    reader = BatchReader(
        prepared.manifest, assignment_rule(base, prepared.manifest), prepared.source
    )
    simulation = SimulationConfig(
        model=base.model,
        method=method,
        outer=replace(base.outer, kind=method, overlap=False),
        n_clusters=base.clusters,
        inner_steps=base.inner_steps,
        total_steps=base.planned_inner_steps,
        round_steps=rounds or base.round_inner_steps(),
        inner=base.inner,
        seed=seed,
    )
    return streaming_loss(
        simulation,
        streaming,
        batches=reader.train_batch,
        eval_batches=reader.eval_batches(base.eval_batches),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tau", type=int, nargs="+", default=[0])
    parser.add_argument("--fragments", type=int, nargs="+", default=[1])
    parser.add_argument(
        "--outer-lr-end",
        type=float,
        nargs="+",
        default=[None],
        help="the outer lr at the last round (a cosine from the preset's); default constant",
    )
    parser.add_argument("--flush", action="store_true", help="flush the residuals at the end")
    parser.add_argument(
        "--rounds",
        type=lambda text: tuple(int(h) for h in text.split(",")),
        default=None,
        help="H of every round, comma-separated, adding up to 200 (default: the preset's)",
    )
    parser.add_argument(
        "--outer-steps", type=int, default=8, help="T (8: bench comm --quick; 40: bench comm)"
    )
    parser.add_argument(
        "--method",
        choices=("dilocox", "diloco"),
        default="dilocox",
        help="diloco: the preset's outer step without compression",
    )
    parser.add_argument("--inner-lr", type=float, help="the inner peak lr (the preset's: 6e-3)")
    parser.add_argument("--outer-lr", type=float, help="the outer lr (the preset's: 0.9)")
    parser.add_argument(
        "--outer-momentum", type=float, help="the outer Nesterov momentum (the preset's: 0.5)"
    )
    parser.add_argument("--seed", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    tuning = {
        "inner_lr": args.inner_lr,
        "outer_lr": args.outer_lr,
        "outer_momentum": args.outer_momentum,
    }
    for seed in args.seed:
        for fragments in args.fragments:
            for tau in args.tau:
                for end in args.outer_lr_end:
                    streaming = Streaming(
                        fragments=fragments, tau=tau, outer_lr_end=end, flush=args.flush
                    )
                    result = _tiny(
                        streaming,
                        seed,
                        args.rounds,
                        outer_steps=args.outer_steps,
                        method=args.method,
                        **tuning,
                    )
                    line = {
                        "seed": seed,
                        "method": args.method,
                        "outer_steps": args.outer_steps,
                        "rounds": args.rounds,
                        **{name: value for name, value in tuning.items() if value is not None},
                        **asdict(streaming),
                    }
                    print(json.dumps({**line, **asdict(result)}), flush=True)
                    if not math.isfinite(result.final_loss):
                        raise SystemExit(f"{line}: the run diverged")


if __name__ == "__main__":
    main()
