"""The outer loop of one stage shard on one cluster: pseudo-gradient, exchange bookkeeping,
deterministic rank-ordered averaging, anomaly checks and the outer Nesterov step.

How the pseudo-gradient becomes bytes is the codec's business (codec.py: fp32 for DiLoCo,
lowrank_codec.py for DiLoCoX); when the averaged pseudo-gradient is applied is the delay
rule's (blocking here; the one-step-delay rule of DiLoCoX is documented in
docs/outer-algorithm.md). Every reduction runs in cluster order on CPU tensors or in fixed-order
elementwise kernels, so the result is bitwise identical on every cluster and on every re-run.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence

import torch

from trainer.outer.anomaly import AnomalyDetector, ContributionStats
from trainer.outer.codec import Codec, check_payload
from trainer.outer.config import OuterConfig
from trainer.outer.errors import CallOrderError, OuterStateError, PayloadError
from trainer.outer.nesterov import OuterNesterov
from trainer.outer.protocol import Anomaly, Contribution, OuterUpdate, RoundSignals


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
    ) -> None:
        if not 0 <= cluster < n_clusters:
            raise OuterStateError(f"expected 0 <= cluster < n_clusters ({n_clusters}), got {cluster}")
        self.config = config
        self.overlapped = config.overlapped
        self.cluster = cluster
        self.n_clusters = n_clusters
        self.names = [name for name, _ in named_params]
        self.shapes = [p.shape for _, p in named_params]
        self.codec = codec
        self.outer = OuterNesterov(
            names=self.names,
            initial=[p for _, p in named_params],
            lr=config.outer_lr,
            momentum=config.outer_momentum,
            nesterov=config.nesterov,
        )
        self.detector = AnomalyDetector(
            norm_ratio=config.anomaly_norm_ratio,
            min_cosine=config.anomaly_min_cosine,
            history=config.anomaly_history,
            exclude=config.anomaly_exclude,
        )
        self._next_round = 0  # the round the next contribution() must be for
        self._pending: dict[int, torch.Tensor] = {}  # own payloads contributed, not yet applied

    # ----------------------------------------------------------------------------------------
    # OuterAlgorithm

    def contribution(self, round: int, local: Sequence[torch.Tensor]) -> Contribution:
        self._check_local(local)
        if round != self._next_round:
            raise CallOrderError(f"expected contribution for round {self._next_round}, got {round}")
        if not self.overlapped and self._pending:
            raise CallOrderError(
                f"expected apply({min(self._pending)}) before the next contribution (blocking mode)"
            )
        # Δ = θ_global − θ_local (DiLoCo Algorithm 1), in fp32 whatever the local dtype.
        pseudo_gradient = [g - p.detach().to(torch.float32) for g, p in zip(self.outer.params, local, strict=True)]
        payload = self.codec.encode(round, pseudo_gradient)
        self._pending[round] = payload
        self._next_round = round + 1
        return Contribution(
            payload=payload,
            digest=payload_digest(payload),
            stats={"pseudo_gradient_norm": _norm(pseudo_gradient)},
        )

    def apply(
        self,
        round: int,
        gathered: Sequence[torch.Tensor],
        local: Sequence[torch.Tensor],
        signals: RoundSignals,
    ) -> OuterUpdate:
        self._check_local(local)
        if not self._pending or round != min(self._pending):
            expected = min(self._pending) if self._pending else "a contribution() first"
            raise CallOrderError(f"expected apply for round {expected}, got {round}")
        if len(gathered) != self.n_clusters:
            raise PayloadError(f"expected {self.n_clusters} gathered payloads, got {len(gathered)}")
        payload_bytes = self.codec.payload_length(round)
        for payload in gathered:
            check_payload(payload, payload_bytes)
        if not torch.equal(gathered[self.cluster].cpu(), self._pending[round].cpu()):
            raise PayloadError(
                f"expected gathered[{self.cluster}] to be this cluster's payload for round {round}"
            )
        digests = [payload_digest(p) for p in gathered]
        coordinates = [self.codec.coordinates(round, p) for p in gathered]

        anomalies = self._check(round, coordinates)
        excluded = {a.cluster for a in anomalies if a.excluded}
        included = [c for i, c in enumerate(coordinates) if i not in excluded]
        stats: dict[str, float] = {"included_clusters": float(len(included))}
        if included:
            mean = _rank_ordered_mean(included)
            pseudo_gradient = self.codec.expand(round, mean)
            step = self.outer.step(pseudo_gradient)
            stats["mean_pseudo_gradient_norm"] = _norm(pseudo_gradient)
            stats["outer_step_norm"] = _norm(step)
        else:
            stats["outer_step_skipped"] = 1.0
        stats["global_param_norm"] = _norm(self.outer.params)
        self.codec.finish_round(round, coordinates, signals)
        del self._pending[round]
        for target, source in zip(local, self.outer.params, strict=True):
            target.copy_(source)
        return OuterUpdate(
            round=round,
            contribution_digests=digests,
            anomalies=anomalies,
            payload_bytes=payload_bytes,
            rank=self.codec.rank,
            bits=self.codec.bits,
            stats=stats,
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        state = self.outer.state_dict("")
        state.update(self.codec.state_dict("codec."))
        state.update(self.detector.state_dict(""))
        state["next_round"] = torch.tensor(self._next_round, dtype=torch.int64)
        for round, payload in self._pending.items():
            state[f"pending.{round}"] = payload.detach().cpu().clone()
        return state

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        self.outer.load_state_dict(state, "")
        self.codec.load_state_dict(state, "codec.")
        self.detector.load_state_dict(state, "")
        if "next_round" not in state:
            raise OuterStateError("expected key 'next_round' in the outer state, it is missing")
        self._next_round = int(state["next_round"].item())
        self._pending = {
            int(key.removeprefix("pending.")): value.clone()
            for key, value in state.items()
            if key.startswith("pending.")
        }

    def pending_contribution(self) -> Contribution | None:
        """The contribution sent but not yet applied (overlapped mode), so a runtime resumed
        from a checkpoint can start its exchange again; None when nothing is pending."""
        if not self._pending:
            return None
        payload = self._pending[min(self._pending)]
        return Contribution(payload=payload, digest=payload_digest(payload))

    # ----------------------------------------------------------------------------------------

    def _check_local(self, local: Sequence[torch.Tensor]) -> None:
        if len(local) != len(self.shapes):
            raise PayloadError(f"expected {len(self.shapes)} local parameters, got {len(local)}")
        for name, shape, tensor in zip(self.names, self.shapes, local, strict=True):
            if tensor.shape != shape:
                raise PayloadError(f"expected {name} of shape {tuple(shape)}, got {tuple(tensor.shape)}")

    def _check(self, round: int, coordinates: Sequence[Sequence[torch.Tensor]]) -> list[Anomaly]:
        if not self.config.anomaly_checks:
            return []
        momentum = self.outer.momentum_buffers
        has_momentum = any(bool(b.any()) for b in momentum)
        momentum_coordinates = self.codec.project(round, momentum) if has_momentum else None
        stats = []
        for i, mine in enumerate(coordinates):
            norm = _norm(mine)
            if momentum_coordinates is not None:
                reference, kind = momentum_coordinates, "momentum"
            else:
                others = [c for j, c in enumerate(coordinates) if j != i]
                reference, kind = (_rank_ordered_mean(others) if others else []), "others"
            cosine = _cosine(mine, reference) if reference else None
            stats.append(ContributionStats(norm=norm, cosine=cosine, reference=kind))
        return self.detector.check(stats)


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
    return math.fsum(float(torch.dot(x.reshape(-1).double(), y.reshape(-1).double())) for x, y in zip(a, b, strict=True))


def _norm(tensors: Sequence[torch.Tensor]) -> float:
    return math.sqrt(max(_dot(tensors, tensors), 0.0)) if all(
        bool(torch.isfinite(t).all()) for t in tensors
    ) else math.nan


def _cosine(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float | None:
    na, nb = _norm(a), _norm(b)
    if not (math.isfinite(na) and math.isfinite(nb)) or na == 0.0 or nb == 0.0:
        return None
    return _dot(a, b) / (na * nb)
