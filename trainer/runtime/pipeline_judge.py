"""The runtime's ``Judge`` (trainer/outer/judge.py): one verdict per cluster, reached together by
the stages of a cluster's pipeline.

Each stage process's outer algorithm holds only its share of every contribution. In ``apply``:

1. ``combine``: the stages all-gather their statistics (Gram matrix, cosines with the previous
   mean, repeated payloads, digests; a few hundred floats) over the cluster's pipeline group
   and sum them in stage order, so every stage holds the same numbers;
2. ``score``: the stages evaluate the global model moved by each contribution together, through
   the pipeline the cluster trains with -- each stage loads its share of ``θ − Δ_i``, the tied
   embedding's copy follows stage 0's, and the last stage's loss is broadcast to the others --
   then put their training parameters back.

Every stage makes the same collective calls in the same order (the sequence depends only on the
combined statistics), and every cluster computes the same verdict from the same payloads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from records.outer_step import ContributionScore
from trainer.data.reader import Batch, BatchReader
from trainer.errors import WorkerError
from trainer.outer.config import OuterConfig
from trainer.outer.contribution_score import score_contributions
from trainer.outer.judge import Examination, scored_batches
from trainer.outer.verdict import ContributionStatistics
from trainer.runtime.collectives import gather_floats
from trainer.runtime.pipeline import PipelineRunner


class PipelineJudge:
    def __init__(
        self,
        config: OuterConfig,
        *,
        params: Sequence[torch.Tensor],
        sync_tied: Callable[[], None],
        runner: PipelineRunner,
        reader: BatchReader,
        group: dist.ProcessGroup,
        last_stage_rank: int,
        device: torch.device,
    ) -> None:
        self.config = config
        self.params = params
        """This stage's parameters the outer algorithm owns (the module's own tensors)."""
        self.sync_tied = sync_tied
        self.runner = runner
        self.reader = reader
        self.group = group
        """The cluster's pipeline group (group rank = stage)."""
        self.last_stage_rank = last_stage_rank
        self.device = device

    def combine(self, statistics: ContributionStatistics) -> ContributionStatistics:
        return combine_stage_statistics(statistics, self.group, self.device)

    def score(
        self, examination: Examination, statistics: ContributionStatistics, finite: Sequence[bool]
    ) -> list[ContributionScore | None] | None:
        if examination.data is None:  # every stage was told the same (the worker tells them all)
            return None
        saved = [p.detach().clone() for p in self.params]
        try:
            return score_contributions(
                PipelineProbe(self, examination),
                finite=finite,
                held_out=self.reader.eval_batches(self.config.anomaly_probe_batches),
                own=scored_batches(
                    self.reader,
                    examination.round,
                    examination.clusters,
                    statistics,
                    examination.data,
                    self.config.anomaly_own_batches,
                ),
            )
        finally:
            with torch.no_grad():
                for param, value in zip(self.params, saved, strict=True):
                    param.copy_(value)
            self.sync_tied()


def combine_stage_statistics(
    statistics: ContributionStatistics, group: dist.ProcessGroup, device: torch.device
) -> ContributionStatistics:
    """Every stage's statistics of the round summed in stage order (``combine`` above). The
    stages first agree on how many contributions they judge: stages that disagree (they read
    different contributors for the round) get a clear error rather than gloo aborting the
    process on an all-gather of mismatched sizes."""
    counts = [int(c[0]) for c in gather_floats([float(statistics.clusters)], group, device)]
    if len(set(counts)) != 1:
        raise WorkerError(
            "the stages of this cluster judge different numbers of contributions for the round "
            f"({counts}, in stage order): they did not read the same contributors"
        )
    stages = gather_floats(statistics.to_floats(), group, device)
    return ContributionStatistics.combine([ContributionStatistics.from_floats(s) for s in stages])


class PipelineProbe:
    """A ``LossProbe`` over the cluster's pipeline (one per scored round)."""

    def __init__(self, judge: PipelineJudge, examination: Examination) -> None:
        self.judge = judge
        self.examination = examination

    def load(self, candidate: int | None) -> None:
        base = self.examination.base
        delta = self.examination.expand(candidate) if candidate is not None else None
        with torch.no_grad():
            for k, param in enumerate(self.judge.params):
                param.copy_(base[k] if delta is None else base[k] - delta[k])
        self.judge.sync_tied()

    def loss(self, batches: Sequence[Batch]) -> float:
        judge = self.judge
        value = judge.runner.evaluate(list(batches))  # the last stage's mean, None elsewhere
        box = torch.tensor(
            [value if value is not None else 0.0], dtype=torch.float64, device=judge.device
        )
        dist.broadcast(box, src=judge.last_stage_rank, group=judge.group)
        return float(box.item())
