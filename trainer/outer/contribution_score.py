"""Contribution scores: what a cluster's decoded contribution does to the loss when it alone is
applied to the global parameters.

For cluster ``i`` of a round with global parameters ``θ`` (the ones the round's mean is about
to be applied to) and decoded contribution ``Δ_i`` (every stage's):

* ``held_out = L_P(θ − Δ_i) − L_P(θ)`` on the probe ``P``: the first
  ``OuterConfig.anomaly_probe_batches`` held-out batches, the same every round;
* ``own_data = L_i(θ − Δ_i) − L_i(θ)`` on ``anomaly_own_batches`` of the batches cluster ``i``
  trained on in the round (trainer/data/assignment.py), picked by :func:`own_inner_steps`.

``θ − Δ_i`` is where the contribution alone, with an outer step of 1 and no momentum, takes the
global model: in blocking DiLoCo it is the cluster's own (decoded) local model. An honest cluster
lowers both losses and its own data's more (it has just trained on those windows); a poisoned
one raises them; a lazy one gains less, and a cluster that trained on other data, or replays an
old update, gains no more on its own data than on held-out data (Templar's Gauntlet scores peers
the same way: loss improvement on assigned data against other data).

Losses are those of ``trainer/runtime/pipeline.py``'s evaluation: each batch is split into the
run's micro-batches with ``torch.tensor_split``, each micro-batch's mean cross-entropy is taken,
a batch's loss is the mean of those and a set's the mean of its batches. The runtime computes
them through the cluster's pipeline (trainer/runtime/judge.py); :class:`FullModelProbe` computes
the same numbers with the whole model in one process (benchmarks, tests and ``veritrain
verify``), bit for bit on the same hardware: the same operations on the same micro-batches.
A loss that is not finite is recorded as ``LOSS_CAP`` (JSON has no infinity).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from records.outer_step import ContributionScore
from trainer.model import CausalLM, ModelConfig, language_model_loss
from trainer.precision import autocast, parameter_dtype

if TYPE_CHECKING:  # trainer.config imports trainer.outer
    from trainer.config import Precision

Batch = tuple[torch.Tensor, torch.Tensor]
LOSS_CAP = 1e30
"""A score whose loss is not finite is recorded as this (the contribution exploded the model)."""


@dataclass(frozen=True, kw_only=True)
class RoundData:
    """Which global inner steps a round trained on (every cluster: the same steps, its own
    windows)."""

    first_inner_step: int
    inner_steps: int


class ScoreBatches(Protocol):
    """Where the scored windows come from (``trainer.data.reader.BatchReader`` is one)."""

    def eval_batches(self, count: int) -> list[Batch]: ...

    def train_batch(self, cluster: int, inner_step: int) -> Batch: ...


class LossProbe(Protocol):
    """Evaluates the global model moved by one contribution (runtime: the pipeline)."""

    def load(self, candidate: int | None) -> None:
        """Hold ``θ − Δ_candidate`` (None: ``θ`` itself)."""
        ...

    def loss(self, batches: Sequence[Batch]) -> float:
        """Mean loss over ``batches`` of what is loaded (identical on every caller)."""
        ...


def own_inner_steps(seed: bytes, cluster: int, data: RoundData, count: int) -> list[int]:
    """The ``count`` inner steps of the round (all when it has fewer) whose batches cluster
    ``cluster`` is scored on: those with the smallest SHA-256(seed ‖ cluster ‖ step) (8-byte
    little-endian integers), in increasing order."""
    steps = range(data.first_inner_step, data.first_inner_step + data.inner_steps)

    def key(step: int) -> bytes:
        return hashlib.sha256(
            seed + cluster.to_bytes(8, "little") + step.to_bytes(8, "little")
        ).digest()

    return sorted(sorted(steps, key=key)[:count])


def score_contributions(
    probe: LossProbe,
    *,
    finite: Sequence[bool],
    held_out: Sequence[Batch],
    own: Sequence[Sequence[Batch]],
) -> list[ContributionScore | None]:
    """Every finite contribution's score (None for the others), in cluster order. The sequence
    of ``load``/``loss`` calls depends only on ``finite``, so every stage of a pipeline makes
    the same calls in the same order."""
    probe.load(None)
    base_held_out = probe.loss(held_out)
    base_own = [
        probe.loss(batches) if ok else math.nan for ok, batches in zip(finite, own, strict=True)
    ]
    scores: list[ContributionScore | None] = []
    for i, ok in enumerate(finite):
        if not ok:
            scores.append(None)
            continue
        probe.load(i)
        scores.append(
            ContributionScore(
                held_out=_change(probe.loss(held_out), base_held_out),
                own_data=_change(probe.loss(own[i]), base_own[i]),
            )
        )
    probe.load(None)
    return scores


def batch_loss(model: torch.nn.Module, batch: Batch, micro_batches: int) -> float:
    """One batch's loss as the pipeline's evaluation computes it (module docstring)."""
    inputs, targets = batch
    losses = [
        language_model_loss(model(x), y)
        for x, y in zip(
            torch.tensor_split(inputs, micro_batches),
            torch.tensor_split(targets, micro_batches),
            strict=True,
        )
    ]
    return float(torch.stack([loss.detach().float() for loss in losses]).mean().item())


def mean_loss(model: torch.nn.Module, batches: Sequence[Batch], micro_batches: int) -> float:
    """A set of batches' loss: the mean of the batch losses (as ``PipelineRunner.evaluate``)."""
    means = [batch_loss(model, batch, micro_batches) for batch in batches]
    return sum(means) / len(means)


class FullModelProbe:
    """A ``LossProbe`` over the whole model in this process.

    ``base`` maps every parameter the outer algorithm owns (transformers' names, every stage; a
    tied head is the embedding) to ``θ``; ``deltas[i]`` maps the same names to cluster i's
    decoded ``Δ_i`` (None: not finite, never loaded)."""

    def __init__(
        self,
        model: ModelConfig,
        *,
        micro_batches: int,
        base: Mapping[str, torch.Tensor],
        deltas: Sequence[Mapping[str, torch.Tensor] | None],
        device: torch.device | None = None,
        precision: Precision = "fp32",
    ) -> None:
        with torch.random.fork_rng(
            devices=[]
        ):  # the constructor's init must not move training's RNG
            self.model = CausalLM(model).eval().to(device or torch.device("cpu"))
        self.params = dict(self.model.named_parameters())
        missing = sorted(set(self.params) - set(base))
        if missing:
            raise ValueError(f"expected the global parameters of every stage, missing {missing}")
        self.model.to(dtype=parameter_dtype(precision))
        self.precision = precision
        """The run's precision: the pipeline scored under it (bf16 autocast), so must a replay."""
        self.micro_batches = micro_batches
        self.base = base
        self.deltas = deltas

    def load(self, candidate: int | None) -> None:
        delta = self.deltas[candidate] if candidate is not None else None
        with torch.no_grad():
            for name, param in self.params.items():
                value = self.base[name] if delta is None else self.base[name] - delta[name]
                param.copy_(value)

    def loss(self, batches: Sequence[Batch]) -> float:
        device = next(self.model.parameters()).device
        with torch.no_grad(), autocast(self.precision, device):
            return mean_loss(
                self.model, [(x.to(device), y.to(device)) for x, y in batches], self.micro_batches
            )


def _change(candidate: float, base: float) -> float:
    change = candidate - base
    return change if math.isfinite(change) else LOSS_CAP
