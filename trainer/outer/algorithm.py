"""The outer loop of one stage shard on one cluster: pseudo-gradient, exchange bookkeeping,
deterministic rank-ordered averaging, anomaly checks and the outer Nesterov step.

How the pseudo-gradient becomes bytes is the codec's business (codec.py: fp32 for DiLoCo,
lowrank_codec.py for DiLoCoX). This module owns *when* the mean is applied:

* blocking: round t starts from ``θ_t``; ``Δ_t^i = θ_t − x_t^i``;
  ``θ_{t+1} = Nesterov(θ_t, mean_i Δ_t^i)`` and round t+1 starts from ``θ_{t+1}``.
* one-step delay (DiLoCoX, Qi et al. 2025): round t's exchange runs while round t+1 computes.
  Each round's pseudo-gradient is measured from that round's *reference* ``r_t^i``:
  ``Δ_t^i = r_t^i − x_t^i``. The global parameters only ever take outer steps on true means,
  one round late: ``θ_{t+1} = Nesterov(θ_t, mean_i Δ_t^i)`` (identical on every cluster). Round
  t+2's reference is a look-ahead ``r_{t+2}^i = Nesterov*(θ_{t+1}, p^i)`` -- the outer step the
  optimiser *would* take next, on a copy of its state, with a stand-in ``p^i`` for the mean of
  round t+1 that is still in flight (``delay_proxy``: ``anchored`` = this cluster's decoded
  ``Δ_{t+1}^i`` minus half of its offset ``r_{t+1}^i − θ_{t+1}``; ``own`` = without the anchor;
  ``eager`` = the mean of round t with this cluster's part swapped for its fresh one, after Kale
  et al. 2025; ``none`` = start from ``θ_{t+1}``). Nothing is counted twice: the look-ahead only
  moves where rounds start, never ``θ``. Round 1 starts where round 0 ended; after the final
  exchange the local parameters become ``θ_T``.
* local error feedback (``error_feedback="local"``): a round starts at its reference minus the
  residual the codec could not send, so the next pseudo-gradient carries it.

Every reduction runs in cluster order on CPU tensors or in fixed-order elementwise kernels, so
the result is bitwise identical on every cluster and on every re-run (same thread count, same
hardware class: int2's block RMS in quantize.py is a vectorised sum, docs/outer-algorithm.md
§6). The whole outer state lives on the host (``nesterov.HOME``) whatever device trains:
``local`` is read from its device and written back to it with explicit copies.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence

import torch

from records.outer_step import ClusterVerdict, ContributionScore
from trainer.outer.codec import Codec, check_payload
from trainer.outer.config import OuterConfig
from trainer.outer.contribution_score import RoundData
from trainer.outer.errors import CallOrderError, OuterStateError, PayloadError
from trainer.outer.judge import Examination, Judge, StageJudge
from trainer.outer.lowrank_codec import LowRankCodec
from trainer.outer.nesterov import HOME, OuterNesterov
from trainer.outer.protocol import Anomaly, Contribution, Gathered, OuterUpdate, RoundSignals
from trainer.outer.verdict import ContributionStatistics, VerdictHistory, VerdictRule, decide

ANCHOR = 0.5
"""Share of a cluster's start offset pulled back by the ``anchored`` look-ahead: any value in
(¼, ¾) keeps the offset gain ``lr(1+μ)·|k − ANCHOR|`` below 1 for every stiffness k ∈ [0, 1] at
lr 0.7, μ 0.9 (docs/outer-algorithm.md); ½ is the middle."""


def payload_digest(payload: torch.Tensor) -> str:
    """Hex SHA-256 of a payload's bytes (what the cluster signs and the ledger records)."""
    data = payload.detach().cpu().contiguous().numpy()
    return hashlib.sha256(data.data).hexdigest()  # the buffer itself, no copy


class OuterLoop:
    """An ``OuterAlgorithm`` (protocol.py) over one codec; blocking or one-step-delayed."""

    def __init__(
        self,
        config: OuterConfig,
        *,
        named_params: Sequence[tuple[str, torch.Tensor]],
        codec: Codec,
        cluster: int,
        n_clusters: int,
        judge: Judge | None = None,
    ) -> None:
        if not 0 <= cluster < n_clusters:
            raise OuterStateError(
                f"expected 0 <= cluster < n_clusters ({n_clusters}), got {cluster}"
            )
        self.config = config
        self.overlapped = config.overlapped
        """The runtime's call order: round t's exchange is applied during step t+1."""
        self.look_ahead = config.look_ahead
        """Rounds start from a look-ahead of θ (the one-step delay; not with ``apply_delay``)."""
        self.cluster = cluster
        self.n_clusters = n_clusters
        self.names = [name for name, _ in named_params]
        self.shapes = [p.shape for _, p in named_params]
        self.codec = codec
        self.outer = OuterNesterov(
            names=self.names,
            initial=[p for _, p in named_params],
            lr=config.lr,
            momentum=config.momentum,
            nesterov=config.nesterov,
        )
        self.judge: Judge = judge if judge is not None else StageJudge()
        self.rule = VerdictRule.from_config(config)
        self.history = VerdictHistory(config.anomaly_history)
        self._recent_digests: list[list[str]] = []  # this stage's payloads of the last rounds
        self._round_data: dict[int, RoundData] = {}  # what rounds not yet applied trained on
        # Since the last contribution: round -> cluster -> payload of this stage.
        self._applied_payloads: dict[int, dict[int, torch.Tensor]] = {}
        self._next_round = 0  # the round the next contribution() must be for
        self._pending: dict[int, torch.Tensor] = {}  # own payloads contributed, not yet applied
        # Where the current round's pseudo-gradient is measured from (None: θ). Overlapped:
        # the look-ahead; with local error feedback the round *starts* at reference − residual.
        self._reference: list[torch.Tensor] | None = None
        self._contributed_reference: list[torch.Tensor] | None = None  # of the last contribution
        # The short overlap (``apply_delay``): the local parameters as they were contributed,
        # so that ``apply`` keeps the progress the cluster made since (host, fp32).
        self._snapshot: list[torch.Tensor] | None = None
        # The last applied mean, by round: the anomaly checks' tie-breaker for two clusters.
        self._means: dict[int, list[torch.Tensor]] = {}
        self._last_contributors = n_clusters  # how many clusters the mean being applied averages

    # ----------------------------------------------------------------------------------------
    # OuterAlgorithm

    def contribution(self, round: int, local: Sequence[torch.Tensor]) -> Contribution:
        self._check_local(local)
        if round != self._next_round:
            raise CallOrderError(f"expected contribution for round {self._next_round}, got {round}")
        if self._pending and (not self.look_ahead or len(self._pending) > 1):
            raise CallOrderError(
                f"expected apply({min(self._pending)}) before the contribution for round {round}"
            )
        # Δ = start − θ_local (DiLoCo Algorithm 1 with start = θ_global), fp32 whatever the
        # local dtype.
        reference = self._reference if self._reference is not None else self.outer.params
        # ``local`` lives on the training device; the outer state on the host (nesterov.HOME).
        pseudo_gradient = [
            r - p.detach().to(HOME, torch.float32) for r, p in zip(reference, local, strict=True)
        ]
        payload = self.codec.encode(round, pseudo_gradient)
        self._pending[round] = payload
        self._next_round = round + 1
        if self.config.delay_in_use is None:
            self._applied_payloads = {}  # with the short overlap: begin_step() does it
        else:
            self._snapshot = [p.detach().to(HOME, torch.float32, copy=True) for p in local]
        if self.look_ahead:
            self._contributed_reference = [r.clone() for r in reference]
            # Provisional reference of round t+1: if no apply() comes first (round 0), round t+1
            # starts where this round ended, i.e. at reference − residual.
            residual = self._residual()
            self._reference = [
                p.detach().to(HOME, torch.float32) + (e if e is not None else 0.0)
                for p, e in zip(local, residual, strict=True)
            ]
        return Contribution(
            payload=payload,
            digest=payload_digest(payload),
            stats={"pseudo_gradient_norm": _norm(pseudo_gradient), **self.codec.encode_stats},
            segments=self._segments(round),
        )

    def apply(
        self, round: int, gathered: Gathered, local: Sequence[torch.Tensor], signals: RoundSignals
    ) -> OuterUpdate:
        self._check_local(local)
        payloads, clusters = gathered.payloads, gathered.clusters
        if not self._pending or round != min(self._pending):
            expected = min(self._pending) if self._pending else "a contribution() first"
            raise CallOrderError(f"expected apply for round {expected}, got {round}")
        members = list(range(self.n_clusters)) if clusters is None else list(clusters)
        if len(payloads) != len(members):
            raise PayloadError(f"expected {len(members)} gathered payloads, got {len(payloads)}")
        if (
            not members
            or members != sorted(set(members))
            or members[0] < 0
            or members[-1] >= self.n_clusters
        ):
            raise PayloadError(
                "expected distinct clusters below "
                f"{self.n_clusters} in ascending order, got {members}"
            )
        payload_bytes = self.codec.payload_length(round)
        for payload in payloads:
            check_payload(payload, payload_bytes)
        # This cluster's own payload of the round is the one it sent -- or, for a cluster that
        # joined with a peer's state after the round was contributed, the peer's (``_pending``).
        if self.cluster in members and not torch.equal(
            payloads[members.index(self.cluster)].cpu(), self._pending[round].cpu()
        ):
            raise PayloadError(
                f"expected cluster {self.cluster}'s gathered "
                f"payload to be this cluster's own for round {round}"
            )
        examination = self.examine(round, payloads, members)
        verdicts: list[ClusterVerdict] = []
        if self.config.anomaly_checks:
            statistics = self.judge.combine(examination.statistics)
            finite = [m.norm is not None for m in statistics.measures()]
            scores = None
            if self.config.contribution_scores:
                scores = self.judge.score(examination, statistics, finite)
            verdicts = self.rule_on(examination, statistics, scores)
        return self.commit(examination, verdicts, local, signals)

    # ----------------------------------------------------------------------------------------
    # apply() in three parts, public so that one process can drive every stage of a cluster
    # (veritrain verify recomputes a step's verdicts this way)

    def note_round_data(self, round: int, *, first_inner_step: int, inner_steps: int) -> None:
        """What round ``round`` trains on (global inner steps), for its contribution scores; the
        runtime says it before the round's ``contribution``."""
        self._round_data[round] = RoundData(
            first_inner_step=first_inner_step, inner_steps=inner_steps
        )

    def examine(
        self, round: int, gathered: Sequence[torch.Tensor], clusters: Sequence[int] | None = None
    ) -> Examination:
        """Decode the payloads of the round's ``clusters`` (ascending; ``gathered[i]`` is
        ``clusters[i]``'s; None: every cluster 0..n-1) for this stage and measure this stage's
        share of the statistics; changes nothing."""
        clusters = list(range(self.n_clusters)) if clusters is None else list(clusters)
        if len(clusters) != len(gathered):
            raise PayloadError(f"expected {len(clusters)} gathered payloads, got {len(gathered)}")
        digests = [payload_digest(p) for p in gathered]
        coordinates = [self.codec.coordinates(round, p) for p in gathered]
        latest = self._means[max(self._means)] if self._means else None
        statistics = ContributionStatistics.measure(
            coordinates,
            previous=self.codec.project(round, latest) if latest is not None else None,
            digests=digests,
            earlier=frozenset(d for r in self._recent_digests for d in r),
        )
        return Examination(
            round=round,
            clusters=clusters,
            payloads=gathered,
            digests=digests,
            coordinates=coordinates,
            statistics=statistics,
            names=self.names,
            base=self.outer.params,
            expand=lambda i: self.codec.expand(round, coordinates[i]),
            data=self._round_data.get(round),
        )

    def rule_on(
        self,
        examination: Examination,
        statistics: ContributionStatistics,
        scores: Sequence[ContributionScore | None] | None,
    ) -> list[ClusterVerdict]:
        """The round's verdicts from the cluster's combined ``statistics`` (verdict.py); the
        histories move on."""
        verdicts = decide(
            self.rule, statistics.measures(), scores, self.history, clusters=examination.clusters
        )
        self.history.accept(verdicts)
        recent = [*self._recent_digests, list(examination.digests)]
        self._recent_digests = recent[-self.rule.history :]
        return verdicts

    def commit(
        self,
        examination: Examination,
        verdicts: Sequence[ClusterVerdict],
        local: Sequence[torch.Tensor],
        signals: RoundSignals,
    ) -> OuterUpdate:
        """Average the contributions the verdicts keep, step θ and write where the next round
        starts into ``local``."""
        # 1. The rank-ordered mean of what the verdicts keep.
        excluded = {v.cluster for v in verdicts if v.excluded}
        included = [
            c
            for cluster, c in zip(examination.clusters, examination.coordinates, strict=True)
            if cluster not in excluded
        ]
        self._applied_payloads[examination.round] = {
            cluster: p.detach().cpu().clone()
            for cluster, p in zip(examination.clusters, examination.payloads, strict=True)
        }
        return self._commit(
            examination.round,
            clusters=examination.clusters,
            digests=examination.digests,
            included=len(included),
            mean_coordinates=_rank_ordered_mean(included) if included else None,
            own_payload=self._own_payload(examination),
            verdicts=verdicts,
            local=local,
            signals=signals,
        )

    # ----------------------------------------------------------------------------------------
    # The owner-reduce exchange (owner_reduce.py): an owner sees only its share of the tensors

    def owner_statistics(
        self,
        round: int,
        segments: Sequence[Mapping[int, torch.Tensor]],
        share: Sequence[int],
        digests: Sequence[str],
    ) -> ContributionStatistics:
        """One owner's share of this stage's statistics: ``segments[k][i]`` is the ``k``-th
        contributing cluster's segment of tensor ``i`` (``i`` in ``share``), ``digests`` their
        whole payloads' digests (from their headers)."""
        codec = self.segment_codec()
        coordinates = [[codec.segment_coordinates(round, i, s[i]) for i in share] for s in segments]
        previous = None
        if self._means:
            projected = self.codec.project(round, self._means[max(self._means)])
            previous = [projected[i] for i in share]
        return ContributionStatistics.measure(
            coordinates,
            previous=previous,
            digests=digests,
            earlier=frozenset(d for r in self._recent_digests for d in r),
        )

    def owner_mean(
        self, round: int, segments: Sequence[Mapping[int, torch.Tensor]], share: Sequence[int]
    ) -> torch.Tensor:
        """The included clusters' ``segments`` (cluster order) of the tensors in ``share``:
        their rank-ordered mean per tensor, re-encoded as a contribution's segment would be and
        concatenated in ``share`` order (1-D uint8)."""
        codec = self.segment_codec()
        pieces = [
            codec.encode_segment(
                round,
                i,
                _rank_ordered_mean([[codec.segment_coordinates(round, i, s[i])] for s in segments])[
                    0
                ],
            )
            for i in share
        ]
        return torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.uint8)

    def rule_on_statistics(
        self,
        clusters: Sequence[int],
        digests: Sequence[str],
        statistics: ContributionStatistics,
    ) -> list[ClusterVerdict]:
        """``rule_on`` for a round no process holds whole: verdicts on statistics alone."""
        verdicts = decide(self.rule, statistics.measures(), None, self.history, clusters=clusters)
        self.history.accept(verdicts)
        self._recent_digests = [*self._recent_digests, list(digests)][-self.rule.history :]
        return verdicts

    def commit_mean(
        self,
        round: int,
        *,
        clusters: Sequence[int],
        digests: Sequence[str],
        verdicts: Sequence[ClusterVerdict],
        mean_payload: torch.Tensor | None,
        own_payload: torch.Tensor | None,
        local: Sequence[torch.Tensor],
        signals: RoundSignals,
    ) -> OuterUpdate:
        """``commit`` with the round's mean already combined by its owners: ``mean_payload``
        (None: every contribution was excluded) decodes like a payload. ``own_payload`` is this
        cluster's (None: the one it sent)."""
        excluded = {v.cluster for v in verdicts if v.excluded}
        own = own_payload if own_payload is not None else self._pending.get(round)
        if own is None:
            raise PayloadError(f"expected cluster {self.cluster}'s own payload of round {round}")
        return self._commit(
            round,
            clusters=clusters,
            digests=digests,
            included=sum(c not in excluded for c in clusters),
            mean_coordinates=self.codec.coordinates(round, mean_payload)
            if mean_payload is not None
            else None,
            own_payload=own,
            verdicts=verdicts,
            local=local,
            signals=signals,
        )

    def segment_codec(self) -> LowRankCodec:
        """The codec, which must be the low-rank one (its payloads are per-tensor segments)."""
        if not isinstance(self.codec, LowRankCodec):
            raise OuterStateError("expected the low-rank codec for the owner-reduce exchange")
        return self.codec

    def _commit(
        self,
        round: int,
        *,
        clusters: Sequence[int],
        digests: Sequence[str],
        included: int,
        mean_coordinates: list[torch.Tensor] | None,
        own_payload: torch.Tensor,
        verdicts: Sequence[ClusterVerdict],
        local: Sequence[torch.Tensor],
        signals: RoundSignals,
    ) -> OuterUpdate:
        rank = self.codec.rank_of(round)
        payload_bytes = self.codec.payload_length(round)
        stats: dict[str, float] = {"included_clusters": float(included)}
        mean = self.codec.expand(round, mean_coordinates) if mean_coordinates is not None else None
        own = self.codec.expand(round, self.codec.coordinates(round, own_payload))
        self._last_contributors = included

        # 2. The outer step on the global parameters.
        if mean is not None:
            self._means = {round: [m.clone() for m in mean]}
            step = self.outer.step(mean)
            stats["mean_pseudo_gradient_norm"] = _norm(mean)
            stats["outer_step_norm"] = _norm(step)
        else:
            stats["outer_step_skipped"] = 1.0
        stats["global_param_norm"] = _norm(self.outer.params)
        self.codec.finish_round(round, mean_coordinates, signals)
        stats.update(self.codec.last_stats)
        self._pending.pop(round, None)
        self._round_data.pop(round, None)

        # 3. Where the next round starts: its reference, minus what this cluster could not send
        #    yet when error feedback lives in the local parameters. After the final exchange of
        #    a look-ahead run (nothing pending) the local parameters become θ. With the short
        #    overlap the cluster keeps what it trained since it contributed (Streaming DiLoCo's
        #    overlap, arXiv 2501.18512 §2.3): nothing when the round is applied at its own end.
        reference = self._next_reference(mean, own)
        final = self.look_ahead and not self._pending and not self.config.synchronous(round)
        snapshot = self._snapshot if self._snapshot is not None else [None] * len(self.shapes)
        for target, ref, e, sent in zip(local, reference, self._residual(), snapshot, strict=True):
            progress = target - sent.to(target.device, target.dtype) if sent is not None else None
            target.copy_(ref if e is None or final else ref - e)
            if progress is not None:
                target.add_(progress)
        self._snapshot = None
        self._reference = reference if self.look_ahead else None
        return OuterUpdate(
            round=round,
            clusters=list(clusters),
            contribution_digests=list(digests),
            anomalies=[
                Anomaly(cluster=v.cluster, reason=v.reason, excluded=v.excluded)
                for v in verdicts
                if v.flags
            ],
            payload_bytes=payload_bytes,
            rank=rank,
            bits=self.codec.bits,
            stats=stats,
            verdicts=list(verdicts),
        )

    def begin_step(self) -> None:
        """The runtime starts an outer step: ``applied_payloads`` starts empty. (Without the
        short overlap a step applies nothing before it contributes, and ``contribution`` empties
        it as well; with it, the round in flight is applied before.)"""
        self._applied_payloads = {}

    def applied_payloads(self) -> dict[int, dict[int, torch.Tensor]]:
        """Each contributing cluster's payload (by cluster) of each round applied in this
        cluster's current outer step (since its last ``contribution`` or ``begin_step``): what
        a step's record names, kept so the runtime can store it."""
        return {round: dict(payloads) for round, payloads in self._applied_payloads.items()}

    def _own_payload(self, examination: Examination) -> torch.Tensor:
        """This cluster's payload of the round being committed: the one it sent (or, having
        joined with a peer's state, the peer's), else -- a replay (replay.py) commits rounds it
        did not contribute in this process -- the gathered one."""
        pending = self._pending.get(examination.round)
        if pending is not None:
            return pending
        if self.cluster not in examination.clusters:
            raise PayloadError(
                f"expected cluster {self.cluster} among the clusters of round {examination.round}, "
                f"got {list(examination.clusters)}"
            )
        return examination.payloads[list(examination.clusters).index(self.cluster)]

    def state_dict(self) -> dict[str, torch.Tensor]:
        state = self.outer.state_dict("")
        state.update(self.codec.state_dict("codec."))
        state.update(self.history.state_dict(""))
        state.update(_digest_state(self._recent_digests))
        for round, data in self._round_data.items():
            state[f"round_data.{round}"] = torch.tensor(
                [data.first_inner_step, data.inner_steps], dtype=torch.int64
            )
        state["next_round"] = torch.tensor(self._next_round, dtype=torch.int64)
        for round, payload in self._pending.items():
            state[f"pending.{round}"] = payload.detach().cpu().clone()
        for label, tensors in (
            ("reference", self._reference),
            ("contributed", self._contributed_reference),
            ("snapshot", self._snapshot),
        ):
            for name, tensor in zip(self.names, tensors or [], strict=False):
                state[f"{label}.{name}"] = tensor.clone()
        for round, mean in self._means.items():
            for name, tensor in zip(self.names, mean, strict=True):
                state[f"mean.{round}.{name}"] = tensor.clone()
        return state

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        self.outer.load_state_dict(state, "")
        self.codec.load_state_dict(state, "codec.")
        self.history.load_state_dict(state, "")
        self._recent_digests = _load_digests(state)
        self._round_data = {
            int(key.removeprefix("round_data.")): RoundData(
                first_inner_step=int(value[0].item()), inner_steps=int(value[1].item())
            )
            for key, value in state.items()
            if key.startswith("round_data.")
        }
        if "next_round" not in state:
            raise OuterStateError("expected key 'next_round' in the outer state, it is missing")
        self._next_round = int(state["next_round"].item())
        self._pending = {
            int(key.removeprefix("pending.")): value.clone()
            for key, value in state.items()
            if key.startswith("pending.")
        }
        self._reference = _optional_tensors(state, "reference", self.names)
        self._contributed_reference = _optional_tensors(state, "contributed", self.names)
        self._snapshot = _optional_tensors(state, "snapshot", self.names)
        rounds = {int(key.split(".")[1]) for key in state if key.startswith("mean.")}
        self._means = {}
        for r in sorted(rounds):
            mean = _optional_tensors(state, f"mean.{r}", self.names)
            if mean is not None:
                self._means[r] = mean

    def global_parameters(self) -> list[torch.Tensor]:
        """The fp32 global parameters θ (identical on every cluster): the model to evaluate
        and to checkpoint as the run's weights (in overlapped mode the local parameters are a
        look-ahead of θ, not θ)."""
        return [p.clone() for p in self.outer.params]

    def pending_contribution(self) -> Contribution | None:
        """The contribution sent but not yet applied (overlapped mode), so a runtime resumed
        from a checkpoint can start its exchange again; None when nothing is pending."""
        if not self._pending:
            return None
        round = min(self._pending)
        payload = self._pending[round]
        return Contribution(
            payload=payload, digest=payload_digest(payload), segments=self._segments(round)
        )

    def _segments(self, round: int) -> list[int]:
        return self.codec.segment_lengths(round) if isinstance(self.codec, LowRankCodec) else []

    # ----------------------------------------------------------------------------------------

    def _residual(self) -> list[torch.Tensor | None]:
        """Per tensor, the residual to keep in the local parameters (local error feedback)."""
        residual = self.codec.residual() if self.config.error_feedback == "local" else None
        return list(residual) if residual is not None else [None] * len(self.shapes)

    def _next_reference(
        self, mean: Sequence[torch.Tensor] | None, own: Sequence[torch.Tensor]
    ) -> list[torch.Tensor]:
        """Blocking, or nothing in flight: θ. Overlapped with round t+1 in flight: the
        look-ahead described in the module docstring."""
        proxy = self.config.delay_proxy
        if not self.look_ahead or not self._pending or proxy == "none":
            return [p.clone() for p in self.outer.params]
        fresh_round = min(self._pending)
        fresh = self.codec.expand(
            fresh_round, self.codec.coordinates(fresh_round, self._pending[fresh_round])
        )
        if proxy == "eager" and mean is not None:
            # mean_t with this cluster's Δ_t swapped for its Δ_{t+1}
            stand_in = [
                m + (f - o) / self._last_contributors
                for m, f, o in zip(mean, fresh, own, strict=True)
            ]
        elif proxy == "anchored" and self._contributed_reference is not None:
            # Δ_{t+1} minus half of how far this cluster's round t+1 started from θ_{t+1}
            stand_in = [
                f - ANCHOR * (r - g)
                for f, r, g in zip(
                    fresh, self._contributed_reference, self.outer.params, strict=True
                )
            ]
        else:
            stand_in = fresh
        return self.outer.lookahead(stand_in)

    def _check_local(self, local: Sequence[torch.Tensor]) -> None:
        if len(local) != len(self.shapes):
            raise PayloadError(f"expected {len(self.shapes)} local parameters, got {len(local)}")
        for name, shape, tensor in zip(self.names, self.shapes, local, strict=True):
            if tensor.shape != shape:
                raise PayloadError(
                    f"expected {name} of shape {tuple(shape)}, got {tuple(tensor.shape)}"
                )


def _optional_tensors(
    state: Mapping[str, torch.Tensor], label: str, names: Sequence[str]
) -> list[torch.Tensor] | None:
    tensors = [state.get(f"{label}.{name}") for name in names]
    present = [t.clone() for t in tensors if t is not None]
    if present and len(present) != len(names):
        raise OuterStateError(
            f"expected every {label}.* tensor or none, got {len(present)} of {len(names)}"
        )
    return present or None


def _digest_state(rounds: Sequence[Sequence[str]]) -> dict[str, torch.Tensor]:
    flat = b"".join(bytes.fromhex(d) for r in rounds for d in r)
    return {
        "verdict.digests": torch.tensor(list(flat), dtype=torch.uint8),
        "verdict.digests_counts": torch.tensor([len(r) for r in rounds], dtype=torch.int64),
    }


def _load_digests(state: Mapping[str, torch.Tensor]) -> list[list[str]]:
    if "verdict.digests" not in state or "verdict.digests_counts" not in state:
        raise OuterStateError("expected key 'verdict.digests' in the outer state, it is missing")
    flat = bytes(state["verdict.digests"].tolist())
    counts = [int(c) for c in state["verdict.digests_counts"].tolist()]
    if len(flat) != 32 * sum(counts):
        raise OuterStateError(
            f"expected {sum(counts)} digests in verdict.digests, got {len(flat)} bytes"
        )
    rounds, start = [], 0
    for count in counts:
        rounds.append([flat[32 * i : 32 * (i + 1)].hex() for i in range(start, start + count)])
        start += count
    return rounds


def _rank_ordered_mean(contributions: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
    """Σ_i c_i / n, summed strictly in cluster order (floating-point addition is not
    associative, so a fixed order is what makes every cluster compute the same bits)."""
    total = [t.clone() for t in contributions[0]]
    for contribution in contributions[1:]:
        for acc, t in zip(total, contribution, strict=True):
            acc.add_(t)
    for acc in total:
        acc.div_(len(contributions))
    return total


def _dot(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    return math.fsum(
        float(torch.dot(x.reshape(-1).double(), y.reshape(-1).double()))
        for x, y in zip(a, b, strict=True)
    )


def _norm(tensors: Sequence[torch.Tensor]) -> float:
    return (
        math.sqrt(max(_dot(tensors, tensors), 0.0))
        if all(bool(torch.isfinite(t).all()) for t in tensors)
        else math.nan
    )
