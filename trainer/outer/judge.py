"""The seam between a stage's outer algorithm and the rest of its cluster, for verdicts.

A stage sees only its share of each contribution; a verdict needs all of them (verdict.py) and a
contribution score needs the whole model (contribution_score.py). The outer algorithm hands a
``Judge`` its ``Examination`` of a round and gets back the statistics of every stage combined
and, if the judge can evaluate the model, every cluster's score. The runtime's judge talks to
the cluster's other stages (trainer/runtime/pipeline_judge.py); the ones here need no one:

* :class:`StageJudge`: this stage is all there is to judge (one stage, no model to evaluate:
  verdicts from the statistics alone);
* :class:`FullModelJudge`: one stage holding the whole model (the in-process simulations of
  benchmarks and tests), scored with the whole model in this process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from records.outer_step import ContributionScore
from trainer.model import ModelConfig
from trainer.outer.contribution_score import (
    FullModelProbe,
    RoundData,
    ScoreBatches,
    own_inner_steps,
    score_contributions,
)
from trainer.outer.errors import OuterStateError
from trainer.outer.verdict import ContributionStatistics, score_seed


@dataclass(frozen=True, kw_only=True)
class Examination:
    """One stage's view of one round's gathered contributions, before any verdict."""

    round: int
    clusters: Sequence[int]
    """The clusters that contributed to the round (its quorum's, ascending): entry ``i`` of
    every sequence below, and of the statistics, is cluster ``clusters[i]``'s."""
    payloads: Sequence[torch.Tensor]
    """Each contributing cluster's payload for this stage."""
    digests: Sequence[str]
    """SHA-256 of each contributing cluster's payload for this stage."""
    coordinates: Sequence[Sequence[torch.Tensor]]
    """Each contributing cluster's decoded coordinates (codec.py)."""
    statistics: ContributionStatistics
    """This stage's share of the statistics."""
    names: Sequence[str]
    """The stage's parameter names (what ``base`` and the deltas hold, in order)."""
    base: Sequence[torch.Tensor]
    """θ of this stage (fp32 global parameters) -- read-only."""
    expand: Callable[[int], list[torch.Tensor]]
    """Entry i's decoded contribution Δ_i in parameter space (fp32)."""
    data: RoundData | None
    """The inner steps the round trained on (None: the runtime did not say; no scores)."""


class Judge(Protocol):
    def combine(self, statistics: ContributionStatistics) -> ContributionStatistics:
        """Every stage's statistics of this cluster, combined in stage order."""
        ...

    def score(
        self, examination: Examination, statistics: ContributionStatistics, finite: Sequence[bool]
    ) -> list[ContributionScore | None] | None:
        """Every cluster's contribution score (None where ``finite`` is False), or None when
        this judge cannot evaluate the model."""
        ...


class StageJudge:
    """This stage is the whole picture; no model to evaluate."""

    def combine(self, statistics: ContributionStatistics) -> ContributionStatistics:
        return statistics

    def score(
        self, examination: Examination, statistics: ContributionStatistics, finite: Sequence[bool]
    ) -> list[ContributionScore | None] | None:
        return None


class FullModelJudge:
    """One stage holding the whole model, scored in this process. Every cluster's outer
    algorithm of a simulation may share one: a round already scored (same round, same
    payloads) is answered from memory."""

    def __init__(
        self,
        model: ModelConfig,
        *,
        batches: ScoreBatches,
        micro_batches: int,
        probe_batches: int,
        own_batches: int,
    ) -> None:
        self.model = model
        self.batches = batches
        self.micro_batches = micro_batches
        self.probe_batches = probe_batches
        self.own_batches = own_batches
        self._last: (
            tuple[tuple[int, tuple[tuple[str, ...], ...]], list[ContributionScore | None]] | None
        ) = None

    def combine(self, statistics: ContributionStatistics) -> ContributionStatistics:
        return statistics

    def score(
        self, examination: Examination, statistics: ContributionStatistics, finite: Sequence[bool]
    ) -> list[ContributionScore | None] | None:
        if examination.data is None:
            return None
        key = (examination.round, statistics.digests)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        names = list(examination.names)
        probe = FullModelProbe(
            self.model,
            micro_batches=self.micro_batches,
            base=dict(zip(names, examination.base, strict=True)),
            deltas=[
                dict(zip(names, examination.expand(i), strict=True)) if ok else None
                for i, ok in enumerate(finite)
            ],
        )
        scores = score_contributions(
            probe,
            finite=finite,
            held_out=self.batches.eval_batches(self.probe_batches),
            own=scored_batches(
                self.batches,
                examination.round,
                examination.clusters,
                statistics,
                examination.data,
                self.own_batches,
            ),
        )
        self._last = (key, scores)
        return scores


def scored_batches(
    batches: ScoreBatches,
    round: int,
    clusters: Sequence[int],
    statistics: ContributionStatistics,
    data: RoundData,
    count: int,
) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Per contributing cluster (``clusters``, the round's, ascending), the batches of its own
    data it is scored on (contribution_score.py)."""
    if len(clusters) != statistics.clusters:
        raise OuterStateError(
            f"expected statistics of {len(clusters)} clusters, got {statistics.clusters}"
        )
    seed = score_seed(round, statistics.digests)
    return [
        [batches.train_batch(c, step) for step in own_inner_steps(seed, c, data, count)]
        for c in clusters
    ]
