"""The owner-reduce combination (``OuterConfig.exchange = "owner-reduce"``): a round's mean
computed by its owners, so that no cluster receives every payload.

With C clusters an all-gather hands every cluster the other ``C−1`` payloads, so the bytes per
cluster grow with C while a ring all-reduce's stay near two buffers (``2(C−1)/C``). Low-rank
factors on shared bases add up (``mean_i(M_i·V) = mean_i(M_i)·V``: the reason PowerSGD, Vogels
et al. 2019, can all-reduce its factors), so the mean can be reduced like a gradient -- but
quantised codes with per-block scales cannot be summed on the wire. Here the reduction is done
by *owners*, on decoded coordinates (a reduce-scatter whose reduction runs in the owner, then an
all-gather; Patarasuk & Yuan 2009 for the two-phase pattern):

1. A payload is one segment per tensor (``LowRankCodec.segment_lengths``). The round's
   contributing clusters, in ascending order, own disjoint shares of the segments
   (:func:`owner_shares`: largest first to the least loaded owner, a fixed rule every cluster
   computes from the round's lengths and the number of contributors).
2. Every contributor sends each owner its segments of that owner's share (an all-to-all:
   ``(C−1)/C`` of a payload per cluster).
3. Each owner measures its share of the verdict statistics (``OuterLoop.owner_statistics``);
   the shares are summed in owner order (:func:`combine_owners`; on the wire each owner sums a
   chunk of the floats and the sums are all-gathered), so every cluster reaches the same
   verdicts from statistics alone -- no one holds a whole contribution to score it.
4. Each owner averages the included clusters' coordinates of each of its tensors in cluster
   order and re-encodes the mean with the codec (``OuterLoop.owner_mean``); the mean shares are
   all-gathered (``(C−1)/C`` of a payload per cluster) and reassembled into a *mean payload*
   laid out like a contribution (:func:`assemble`). Every cluster applies its decoded
   coordinates.

The mean of a tensor is a function of the included payloads only -- not of which owner
computed it -- and the statistics of the payloads and the fixed share rule, so anyone holding
the signed payloads (``veritrain verify``, or a cluster whose wire failed and that fetched them)
computes the same bits in one process (:func:`stage_statistics`, :func:`stage_mean_payload`).
What the re-encoding drops is not fed back: the price of constant bytes, measured in
docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import torch

from records.outer_step import ClusterVerdict
from trainer.outer.algorithm import OuterLoop, payload_digest
from trainer.outer.errors import OuterStateError, PayloadError
from trainer.outer.protocol import OuterUpdate, RoundSignals
from trainer.outer.verdict import ContributionStatistics

RULE_NAME = "veritrain.owner-reduce/v1"
"""This combination rule, as docs and reports name it (the genesis records it as the outer
configuration's ``exchange``)."""


def owner_shares(lengths: Sequence[int], owners: int) -> list[list[int]]:
    """Which tensor segments each of ``owners`` owners reduces, each share ascending: segments
    by decreasing length (ties: lower index first) go to the owner with the fewest bytes so far
    (ties: lower owner) -- the longest-processing-time rule, within 4/3 of the best balance."""
    if owners < 1:
        raise OuterStateError(f"expected at least one owner, got {owners}")
    loads = [0] * owners
    shares: list[list[int]] = [[] for _ in range(owners)]
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        owner = min(range(owners), key=lambda o: (loads[o], o))
        shares[owner].append(index)
        loads[owner] += lengths[index]
    return [sorted(share) for share in shares]


def split_segments(payload: torch.Tensor, lengths: Sequence[int]) -> list[torch.Tensor]:
    """A payload (1-D uint8) -> its per-tensor segments."""
    if payload.numel() != sum(lengths):
        raise PayloadError(f"expected a payload of {sum(lengths)} bytes, got {payload.numel()}")
    return list(torch.split(payload, list(lengths)))


def share_bytes(lengths: Sequence[int], share: Sequence[int]) -> int:
    return sum(lengths[i] for i in share)


def piece(payload: torch.Tensor, lengths: Sequence[int], share: Sequence[int]) -> torch.Tensor:
    """The segments of ``share`` of a payload, concatenated (what its owner receives)."""
    segments = split_segments(payload, lengths)
    parts = [segments[i] for i in share]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.uint8)


def unpiece(
    data: torch.Tensor, lengths: Sequence[int], share: Sequence[int]
) -> dict[int, torch.Tensor]:
    """The inverse of :func:`piece`: tensor index -> segment."""
    if data.numel() != share_bytes(lengths, share):
        raise PayloadError(
            f"expected a piece of {share_bytes(lengths, share)} bytes, got {data.numel()}"
        )
    parts = torch.split(data, [lengths[i] for i in share]) if share else ()
    return dict(zip(share, parts, strict=True))


def assemble(
    pieces: Sequence[torch.Tensor], lengths: Sequence[int], shares: Sequence[Sequence[int]]
) -> torch.Tensor:
    """The owners' mean pieces (owner order) -> one payload, segments in tensor order."""
    segments: dict[int, torch.Tensor] = {}
    for data, share in zip(pieces, shares, strict=True):
        segments.update(unpiece(data, lengths, share))
    if sorted(segments) != list(range(len(lengths))):
        raise PayloadError(f"expected a segment of every one of {len(lengths)} tensors")
    return torch.cat([segments[i] for i in range(len(lengths))])


def combine_owners(shares: Sequence[ContributionStatistics]) -> ContributionStatistics:
    """One stage's statistics from its owners' shares, summed in owner order; every owner saw
    the same whole-payload digests, so those (and the repeats they imply) are taken once."""
    summed = ContributionStatistics.combine(shares)
    first = shares[0]
    return ContributionStatistics(
        gram=summed.gram,
        previous=summed.previous,
        previous_square=summed.previous_square,
        repeated=first.repeated,
        digests=first.digests,
    )


def stage_statistics(
    loop: OuterLoop, round: int, payloads: Sequence[torch.Tensor], digests: Sequence[str]
) -> ContributionStatistics:
    """Every owner's share of one stage's statistics, computed in one process from the whole
    ``payloads`` of the round's contributors (cluster order), combined as the owners combine
    them."""
    lengths = loop.segment_codec().segment_lengths(round)
    segments = [split_segments(p, lengths) for p in payloads]
    return combine_owners(
        [
            loop.owner_statistics(
                round, [{i: s[i] for i in share} for s in segments], share, digests
            )
            for share in owner_shares(lengths, len(payloads))
        ]
    )


def stage_mean_payload(
    loop: OuterLoop, round: int, payloads: Sequence[torch.Tensor], included: Sequence[bool]
) -> torch.Tensor | None:
    """The mean payload every owner together produces, in one process: ``payloads`` of the
    round's contributors (cluster order), ``included`` by the verdicts (None: none is)."""
    if not any(included):
        return None
    lengths = loop.segment_codec().segment_lengths(round)
    kept = [split_segments(p, lengths) for p, keep in zip(payloads, included, strict=True) if keep]
    shares = owner_shares(lengths, len(payloads))
    pieces = [
        loop.owner_mean(round, [{i: s[i] for i in share} for s in kept], share) for share in shares
    ]
    return assemble(pieces, lengths, shares)


class OwnerWire(Protocol):
    """What ``apply_owned`` needs of the wire (trainer/runtime/owner_exchange.py), or of a
    process that holds every payload (:class:`WholePayloads`). Each phase returns None when the
    wire failed; ``apply_owned`` then computes every owner's part from ``payloads()``."""

    @property
    def clusters(self) -> list[int]:
        """The round's contributing clusters, ascending."""
        ...

    @property
    def payload_digests(self) -> list[str]:
        """Their payloads' digests (what each signed), same order."""
        ...

    @property
    def owner(self) -> int:
        """This process's index among ``clusters`` (the share it owns)."""
        ...

    def segments(self) -> list[dict[int, torch.Tensor]] | None: ...

    def reduce_statistics(
        self, mine: ContributionStatistics | None
    ) -> ContributionStatistics | None:
        """Every owner's statistics summed in owner order, as :func:`combine_owners` sums them
        (the same floats); ``mine``: this owner's share."""
        ...

    def gather_means(self, mine: torch.Tensor | None) -> list[torch.Tensor] | None: ...

    def payloads(self) -> list[torch.Tensor]: ...


class WholePayloads:
    """Every contributor's whole payload at hand (a resumed or lone cluster): every owner's
    part is computed here."""

    def __init__(self, payloads: Mapping[int, torch.Tensor], *, cluster: int) -> None:
        self._payloads = dict(payloads)
        self.clusters = sorted(self._payloads)
        self.payload_digests = [payload_digest(self._payloads[c]) for c in self.clusters]
        self.owner = self.clusters.index(cluster) if cluster in self._payloads else 0

    def segments(self) -> list[dict[int, torch.Tensor]] | None:
        return None

    def reduce_statistics(
        self, mine: ContributionStatistics | None
    ) -> ContributionStatistics | None:
        return None

    def gather_means(self, mine: torch.Tensor | None) -> list[torch.Tensor] | None:
        return None

    def payloads(self) -> list[torch.Tensor]:
        return [self._payloads[c] for c in self.clusters]


def apply_owned(
    loop: OuterLoop,
    round: int,
    wire: OwnerWire,
    local: Sequence[torch.Tensor],
    signals: RoundSignals,
) -> OuterUpdate:
    """``OuterLoop.apply`` for the owner-reduce exchange (steps 2-4 of the module docstring):
    this process owns ``wire.owner``'s share; the verdicts come from every owner's statistics
    combined (and the cluster's stages combined by its judge), the mean from every owner's
    share."""
    clusters, digests = wire.clusters, wire.payload_digests
    lengths = loop.segment_codec().segment_lengths(round)
    shares = owner_shares(lengths, len(clusters))
    share = shares[wire.owner]
    whole: list[torch.Tensor] | None = None
    segments = wire.segments()
    if segments is None:
        whole = wire.payloads()
    # Every member takes part in the statistics phase (a listener cannot know whether the
    # checks are on); they are judged only when they are.
    statistics: ContributionStatistics | None = None
    if whole is None:
        assert segments is not None
        statistics = wire.reduce_statistics(loop.owner_statistics(round, segments, share, digests))
        if statistics is None:
            whole = wire.payloads()
    verdicts: list[ClusterVerdict] = []
    if loop.config.anomaly_checks:
        if statistics is None:
            assert whole is not None
            statistics = stage_statistics(loop, round, whole, digests)
        verdicts = loop.rule_on_statistics(clusters, digests, loop.judge.combine(statistics))
    excluded = {v.cluster for v in verdicts if v.excluded}
    included = [c not in excluded for c in clusters]
    mean_payload: torch.Tensor | None = None
    if whole is None:
        assert segments is not None
        kept = [s for s, keep in zip(segments, included, strict=True) if keep]
        pieces = wire.gather_means(loop.owner_mean(round, kept, share) if kept else None)
        if pieces is None:
            whole = wire.payloads()
        elif kept:
            mean_payload = assemble(pieces, lengths, shares)
    if whole is not None:
        mean_payload = stage_mean_payload(loop, round, whole, included)
    own = (
        whole[clusters.index(loop.cluster)]
        if whole is not None and loop.cluster in clusters
        else None
    )
    return loop.commit_mean(
        round,
        clusters=clusters,
        digests=digests,
        verdicts=verdicts,
        mean_payload=mean_payload,
        own_payload=own,
        local=local,
        signals=signals,
    )
