"""The seam between the distributed runtime and the outer (DiLoCo / DiLoCoX) algorithm.

The runtime (``trainer/runtime``) owns processes, process groups, pipelining, data, timing and
the asynchronous exchange; the outer algorithm (this package) owns everything numerical about
an outer step: the pseudo-gradient, compression, error feedback, the outer Nesterov step, the
one-step-delay rule, rank adaptation and anomaly flags. One ``OuterAlgorithm`` object lives in
every process and handles the parameters of that process's pipeline stage for its cluster.

Call order, per round ``t`` (H inner steps on every cluster, then):

* blocking (``overlapped == False``)::

      c_t = algo.contribution(t, local)           # no communication
      g_t = all_gather(c_t.payload, outer group)  # payloads of the round's clusters, in order
      u_t = algo.apply(t, Gathered(g_t, clusters), local, signals)  # rewrites `local`

* overlapped (``overlapped == True``, DiLoCoX one-step delay)::

      c_t = algo.contribution(t, local)
      h_t = all_gather_async(c_t.payload)         # runs while round t+1 computes
      if t > 0: u_{t-1} = algo.apply(t - 1, Gathered(wait(h_{t-1})), local, signals)
      ... round t+1 computes from `local` as apply left it ...
      (after the last round the runtime waits for and applies the final exchange)

Payloads are 1-D ``torch.uint8`` tensors whose length is identical on every cluster for a given
round (rank and bits are decided from shared information only), so a plain ``all_gather`` works.
The clusters of a round are whichever took part in it (trainer/runtime/membership.py): ``apply``
is told which cluster each payload is from, combines them in cluster order, and may be given a
round this cluster itself did not contribute to (it joined afterwards, with a peer's state).
``state_dict`` must hold everything needed to continue bit-exactly (global fp32 parameters,
outer momentum, error feedback, warm-start factors, rank state, a pending own payload).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from records.outer_step import ClusterVerdict


@dataclass(frozen=True, kw_only=True)
class Contribution:
    """What one cluster sends for one round, for one pipeline stage."""

    payload: torch.Tensor
    """1-D uint8 bytes to all-gather; identical length on every cluster for the round."""
    digest: str
    """Hex SHA-256 of ``payload``'s bytes (the cluster signs and the ledger records it)."""
    stats: Mapping[str, float] = field(default_factory=dict)
    """Local numbers worth reporting (pseudo-gradient norm, error-feedback norm, ...)."""
    segments: Sequence[int] = ()
    """Bytes of each tensor's segment of ``payload`` (the low-rank codec's; empty for the
    dense one): how the owner-reduce exchange splits it (trainer/outer/owner_reduce.py)."""


@dataclass(frozen=True, kw_only=True)
class Anomaly:
    """A flagged cluster of one round (its ``ClusterVerdict``, in short)."""

    cluster: int
    reason: str
    """Human-readable, e.g. 'norm 812.4 is 96x the reference 8.45 (limit 10x)'."""
    excluded: bool


@dataclass(frozen=True, kw_only=True)
class RoundSignals:
    """Numbers the runtime has made identical on every rank (all-reduced) before ``apply``."""

    mean_train_loss: float
    """Mean over clusters of the last round's training loss."""


@dataclass(frozen=True, kw_only=True)
class OuterUpdate:
    """The result of applying one round's exchange."""

    round: int
    clusters: Sequence[int]
    """The clusters whose payloads were combined, ascending."""
    contribution_digests: Sequence[str]
    """Hex SHA-256 of each of those clusters' payloads, in the same order."""
    anomalies: Sequence[Anomaly]
    payload_bytes: int
    """Bytes of one cluster's payload for this stage (what it put on the wire once)."""
    rank: int
    """Low-rank rank used this round (0 = uncompressed)."""
    bits: int
    """Quantisation bits used this round (32 = fp32, 16 = bf16)."""
    stats: Mapping[str, float] = field(default_factory=dict)
    """Norms of the averaged pseudo-gradient, the outer step, the global parameters, ..."""
    verdicts: Sequence[ClusterVerdict] = ()
    """One per cluster (cluster order), identical in every stage of every cluster (empty when
    the checks are off); ``anomalies`` are the flagged ones."""


@dataclass(frozen=True)
class Gathered:
    """The payloads a round's exchange delivered, and whose they are."""

    payloads: Sequence[torch.Tensor]
    """``payloads[i]`` is cluster ``clusters[i]``'s."""
    clusters: Sequence[int] | None = None
    """The round's contributors, ascending (None: every cluster 0..n-1)."""


class OuterAlgorithm(Protocol):
    overlapped: bool
    """True when the runtime should exchange round t while round t+1 computes."""

    def contribution(self, round: int, local: Sequence[torch.Tensor]) -> Contribution:
        """Compute this cluster's payload for ``round`` from the local parameters."""
        ...

    def apply(
        self, round: int, gathered: Gathered, local: Sequence[torch.Tensor], signals: RoundSignals
    ) -> OuterUpdate:
        """Combine the round's ``gathered`` payloads, step the global parameters and write the
        parameters the next inner round starts from into ``local`` (in place)."""
        ...

    def state_dict(self) -> dict[str, torch.Tensor]: ...

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None: ...


class ResumableOuterAlgorithm(OuterAlgorithm, Protocol):
    """Optional extension (added by trainer/outer; every algorithm built by
    ``build_outer_algorithm`` has it). In overlapped mode a checkpoint taken after
    ``apply(t - 1)`` still has round t's exchange in flight; a runtime resuming from it calls
    ``pending_contribution()`` after ``load_state_dict`` and starts that all-gather again before
    computing round t+1."""

    def pending_contribution(self) -> Contribution | None:
        """The contribution sent but not yet applied, or None when nothing is pending."""
        ...
