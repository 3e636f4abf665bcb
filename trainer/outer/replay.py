"""The outer part of a recorded step, again, in one process: every stage of cluster 0's outer
algorithm driven from the state recorded before the step and the payloads the step applied.

A verifier (``veritrain verify``, check 12) uses it to recompute what a step's entry says about
its exchanges without re-running any inner step:

1. each stage's outer algorithm is rebuilt from the state saved after the previous step (the
   initial weights of the seed before step 0);
2. for every round the step applied, in order: each stage examines the payloads of the clusters
   that contributed to the round (the quorum its step recorded -- the rules and the majority count
   only those), the stages' statistics are combined in stage order (as the pipeline's stages combine
   them), every contribution is scored with the whole model in this process (``FullModelProbe``: the
   same micro-batches and operations as the pipeline), and the verdicts follow from the same rules;
3. each stage then commits the round with the verdicts the *record* claims (so the state follows
   what the run did even where a recomputation under tolerance would decide differently), and
   the global parameters after the step come out for comparison with its checkpoint.

CPU work runs on one thread, as the trainer's processes do (trainer/runtime/determinism.py), so
on the recorded hardware class the recomputed numbers are the recorded ones bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from records.outer_step import AppliedExchange, ClusterVerdict, ContributionScore, OuterStep
from trainer.model import TIED_HEAD, build_stage
from trainer.outer import OuterLoop, RoundSignals, build_outer_algorithm
from trainer.outer.algorithm import payload_digest
from trainer.outer.contribution_score import (
    FullModelProbe,
    RoundData,
    ScoreBatches,
    score_contributions,
)
from trainer.outer.errors import OuterStateError, PayloadError
from trainer.outer.judge import Examination, scored_batches
from trainer.outer.owner_reduce import stage_mean_payload, stage_statistics
from trainer.outer.verdict import ContributionStatistics

if TYPE_CHECKING:
    from trainer.config import TrainConfig


@dataclass(frozen=True, kw_only=True)
class RecordedRound:
    """One applied round as a step recorded it."""

    round: int
    clusters: Sequence[int]
    """The clusters that contributed to the round (its step's quorum), ascending."""
    payloads: Sequence[Sequence[torch.Tensor]]
    """Per stage, each of those clusters' payload (in the order of ``clusters``)."""
    data: RoundData
    """The inner steps the round trained on (its contributing step's data range)."""
    mean_train_loss: float
    """The contributing step's train loss (the round's ``RoundSignals``)."""
    verdicts: Sequence[ClusterVerdict]
    """The verdicts the record claims (the round is committed with these)."""

    @classmethod
    def of(
        cls,
        contributed: OuterStep,
        applied: AppliedExchange,
        payloads: Sequence[Sequence[torch.Tensor]],
    ) -> RecordedRound:
        """The round ``applied`` as a step's record names it: the quorum, data and train loss
        of ``contributed`` (the step that contributed it), the verdicts it was applied with,
        and ``payloads`` (per stage, in the quorum's cluster order)."""
        first = contributed.data_ranges[0]
        return cls(
            round=applied.round,
            clusters=list(contributed.quorum.clusters),
            payloads=payloads,
            data=RoundData(first_inner_step=first.first_inner_step, inner_steps=first.inner_steps),
            mean_train_loss=contributed.metrics.get("train_loss", math.nan),
            verdicts=applied.verdicts,
        )


@dataclass(frozen=True, kw_only=True)
class ReplayedStep:
    rounds: Sequence[ReplayedRound]
    before: Mapping[str, torch.Tensor]
    """The global parameters before the step, by parameter name."""
    after: Mapping[str, torch.Tensor]
    """... and after it (the recorded verdicts applied)."""


@dataclass(frozen=True, kw_only=True)
class ReplayedRound:
    round: int
    digests: Sequence[Sequence[str]]
    """Per stage, the SHA-256 of each contributing cluster's payload."""
    verdicts: Sequence[ClusterVerdict]
    """The verdicts recomputed from the payloads (empty when the checks are off)."""


def replay_step(
    config: TrainConfig,
    states: Sequence[Mapping[str, torch.Tensor]] | None,
    rounds: Sequence[RecordedRound],
    batches: ScoreBatches,
) -> ReplayedStep:
    """Steps 1-3 of the module docstring. ``states``: cluster 0's outer state of every stage
    after the previous step (None: the seed's initial state)."""
    with _one_thread():
        loops = _stage_loops(config, states)
        before = _weights(loops)
        replayed = []
        for recorded in rounds:
            if len(recorded.payloads) != len(loops):
                raise OuterStateError(
                    f"expected payloads of {len(loops)} stages for round {recorded.round}, "
                    f"got {len(recorded.payloads)}"
                )
            replayed.append(_replay_round(config, loops, recorded, batches))
        return ReplayedStep(rounds=replayed, before=before, after=_weights(loops))


def decoded_payloads(
    config: TrainConfig,
    states: Sequence[Mapping[str, torch.Tensor]] | None,
    round: int,
    payloads: Mapping[tuple[int, int], bytes],
    in_flight: RecordedRound | None = None,
) -> dict[tuple[int, int], dict[str, torch.Tensor]]:
    """What each (cluster, stage)'s payload of ``round`` sends, in parameter space: the
    pseudo-gradient it decodes to, by parameter name. The round's bases come from ``states``,
    every stage's outer state after the previous step (any cluster's: the bases are shared;
    None: the seed's, before step 0). ``veritrain reproduce`` decodes a recorded payload and
    its re-execution this way to compare them tensor by tensor.

    ``in_flight``: the round the step applied before it contributed (the short overlap applies
    round ``round − 1`` a few inner steps into round ``round``). Its exchange is what refreshes
    the bases, so the state after the previous step holds none for ``round`` yet: the round is
    committed first, with the verdicts its record claims, as the run did."""
    with _one_thread():
        loops = _stage_loops(config, states)
        if in_flight is not None:
            _commit_recorded(config, loops, in_flight)
        decoded = {}
        for (cluster, stage), payload in sorted(payloads.items()):
            if not 0 <= stage < len(loops) or not payload:
                raise PayloadError(f"cluster {cluster} stage {stage}: no such stage or payload")
            codec = loops[stage].codec
            data = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
            try:
                tensors = codec.expand(round, codec.coordinates(round, data))
            except (PayloadError, OuterStateError) as exc:
                raise PayloadError(f"cluster {cluster} stage {stage}: {exc}") from exc
            decoded[(cluster, stage)] = dict(zip(loops[stage].names, tensors, strict=True))
        return decoded


def _weights(loops: Sequence[OuterLoop]) -> dict[str, torch.Tensor]:
    return {
        n: t for loop in loops for n, t in zip(loop.names, loop.global_parameters(), strict=True)
    }


def _replay_round(
    config: TrainConfig, loops: Sequence[OuterLoop], recorded: RecordedRound, batches: ScoreBatches
) -> ReplayedRound:
    if config.outer.owner_reduce:
        return _replay_owned_round(config, loops, recorded)
    r = recorded.round
    for loop in loops:
        loop.note_round_data(
            r,
            first_inner_step=recorded.data.first_inner_step,
            inner_steps=recorded.data.inner_steps,
        )
    examinations = [
        loop.examine(r, payloads, recorded.clusters)
        for loop, payloads in zip(loops, recorded.payloads, strict=True)
    ]
    verdicts: list[ClusterVerdict] = []
    if config.outer.anomaly_checks:
        statistics = ContributionStatistics.combine([e.statistics for e in examinations])
        finite = [m.norm is not None for m in statistics.measures()]
        scores: list[ContributionScore | None] | None = None
        if config.outer.contribution_scores:
            names = [n for e in examinations for n in e.names]
            probe = FullModelProbe(
                config.model,
                micro_batches=config.micro_batches,
                base=dict(zip(names, [t for e in examinations for t in e.base], strict=True)),
                deltas=[
                    dict(zip(names, [t for e in examinations for t in e.expand(i)], strict=True))
                    if ok
                    else None
                    for i, ok in enumerate(finite)
                ],
                precision=config.precision,
            )
            scores = score_contributions(
                probe,
                finite=finite,
                held_out=batches.eval_batches(config.outer.anomaly_probe_batches),
                own=scored_batches(
                    batches,
                    r,
                    recorded.clusters,
                    statistics,
                    recorded.data,
                    config.outer.anomaly_own_batches,
                ),
            )
        per_stage = [
            loop.rule_on(e, statistics, scores) for loop, e in zip(loops, examinations, strict=True)
        ]
        verdicts = per_stage[0]
    _commit_recorded(config, loops, recorded, examinations)
    return ReplayedRound(
        round=r, digests=[list(e.digests) for e in examinations], verdicts=verdicts
    )


def _commit_recorded(
    config: TrainConfig,
    loops: Sequence[OuterLoop],
    recorded: RecordedRound,
    examinations: Sequence[Examination] | None = None,
) -> None:
    """Every stage commits ``recorded`` with the verdicts its record claims (step 3 of the
    module docstring); ``examinations``: the stages' own, when the caller has examined it."""
    r, clusters = recorded.round, list(recorded.clusters)
    signals = RoundSignals(mean_train_loss=recorded.mean_train_loss)
    if config.outer.owner_reduce:
        excluded = {v.cluster for v in recorded.verdicts if v.excluded}
        included = [c not in excluded for c in clusters]
        for loop, payloads in zip(loops, recorded.payloads, strict=True):
            own = (
                payloads[clusters.index(loop.cluster)] if loop.cluster in clusters else payloads[0]
            )
            loop.commit_mean(
                r,
                clusters=clusters,
                digests=[payload_digest(p) for p in payloads],
                verdicts=recorded.verdicts,
                mean_payload=stage_mean_payload(loop, r, payloads, included),
                own_payload=own,
                local=[torch.empty_like(p) for p in loop.outer.params],
                signals=signals,
            )
        return
    if examinations is None:
        examinations = [
            loop.examine(r, payloads, clusters)
            for loop, payloads in zip(loops, recorded.payloads, strict=True)
        ]
    for loop, examination in zip(loops, examinations, strict=True):
        scratch = [
            torch.empty_like(p) for p in loop.outer.params
        ]  # where the next round would start
        loop.commit(examination, recorded.verdicts, scratch, signals)


def _replay_owned_round(
    config: TrainConfig, loops: Sequence[OuterLoop], recorded: RecordedRound
) -> ReplayedRound:
    """An owner-reduce round (owner_reduce.py) from every contributor's whole payload: every
    owner's statistics and mean share computed here, combined as the owners combined them."""
    r, clusters = recorded.round, list(recorded.clusters)
    digests = [[payload_digest(p) for p in payloads] for payloads in recorded.payloads]
    verdicts: list[ClusterVerdict] = []
    if loops and loops[0].config.anomaly_checks:
        statistics = ContributionStatistics.combine(
            [
                stage_statistics(loop, r, payloads, d)
                for loop, payloads, d in zip(loops, recorded.payloads, digests, strict=True)
            ]
        )
        per_stage = [
            loop.rule_on_statistics(clusters, d, statistics)
            for loop, d in zip(loops, digests, strict=True)
        ]
        verdicts = per_stage[0]
    _commit_recorded(config, loops, recorded)
    return ReplayedRound(round=r, digests=digests, verdicts=verdicts)


def _stage_loops(
    config: TrainConfig, states: Sequence[Mapping[str, torch.Tensor]] | None
) -> list[OuterLoop]:
    loops = []
    for stage in range(config.stages):
        with torch.random.fork_rng(devices=[]):  # layer constructors draw before the seeded init
            module = build_stage(
                config.model, stage=stage, n_stages=config.stages, seed=config.seed
            )
        named = [
            (name, p.detach())
            for name, p in module.named_parameters()
            if not (module.holds_tied_copy and name == TIED_HEAD)
        ]
        loop = build_outer_algorithm(
            config.outer,
            named_params=named,
            cluster=0,
            n_clusters=config.clusters,
            seed=config.seed,
        )
        assert isinstance(loop, OuterLoop)  # build_outer_algorithm builds nothing else
        if states is not None:
            loop.load_state_dict(states[stage])
        loops.append(loop)
    return loops


@contextmanager
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
