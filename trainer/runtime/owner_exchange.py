"""The owner-reduce exchange on the wire (``OuterConfig.exchange = "owner-reduce"``;
the combination itself: trainer/outer/owner_reduce.py).

Four collectives over torchft's process group of the round's quorum, in this order on every
member (a member that only listens -- a cluster catching up -- takes part with empty or zero
buffers, so nobody waits for it):

1. ``all_to_all_single`` (launched at once, ``async_op=True``: under the one-step delay it runs
   while the next round computes): every contributor sends each owner the segments of that
   owner's share of its payload; the splits follow from the headers' segment lengths, so every
   member knows every size without asking;
2. two ``all_to_all_single`` of the verdict statistics (``C(C+1)/2 + C + 2`` float64 sums per
   owner share): each owner sums one chunk of them over every owner's share, in owner order,
   and sends its sums to the others -- a reduce-scatter with the reduction in the owner, then an
   all-gather, as phases 1 and 3 do for the payload: ``2(C−1)/C`` of the statistics per
   cluster, where an all-gather of every owner's share sent ``C−1`` of them;
3. ``all_to_all_single`` of each owner's re-encoded mean share to every other contributor (an
   all-gather of shares of different sizes, unpadded; a listener is sent none).

A listener sends and receives nothing in phases 2 and 3 (empty splits). Phases 2 and 3 need
the outcome of the one before, so they run when the round is applied (their seconds are
exposed). If any of them fails -- a member died, the link broke -- this
process fetches every contributor's whole payload from where its sender kept it (checked
against the signed digest) and computes every owner's part itself: the result is a function of
the signed payloads alone, so it is the same bits either way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from trainer.errors import WorkerError
from trainer.outer.accounting import statistics_chunks, statistics_floats
from trainer.outer.owner_reduce import owner_shares, piece, share_bytes, unpiece
from trainer.outer.protocol import RoundSignals
from trainer.outer.verdict import ContributionStatistics
from trainer.runtime.exchange import (
    PayloadFetch,
    PendingExchange,
    RoundWire,
    completed_exchange,
)

log = logging.getLogger(__name__)


def _sums(statistics: ContributionStatistics) -> list[float]:
    n = statistics.clusters
    values = [statistics.gram[i][j] for i in range(n) for j in range(i, n)]
    if statistics.previous is None or statistics.previous_square is None:
        return values + [0.0] * n + [0.0, 0.0]
    return values + list(statistics.previous) + [statistics.previous_square, 1.0]


def _from_sums(values: list[float], mine: ContributionStatistics) -> ContributionStatistics:
    """The statistics whose float64 sums over the owners are ``values`` (``_sums``'s layout,
    each owner's "there is a previous mean" flag summed too); the digests and repeats are every
    owner's (the headers'), taken from ``mine``."""
    n = mine.clusters
    gram = [[0.0] * n for _ in range(n)]
    at = 0
    for i in range(n):
        for j in range(i, n):
            gram[i][j] = gram[j][i] = values[at]
            at += 1
    # As ContributionStatistics.combine: a previous mean only when every owner had one.
    has_previous = values[at + n + 1] == float(n)
    return ContributionStatistics(
        gram=tuple(tuple(row) for row in gram),
        previous=tuple(values[at : at + n]) if has_previous else None,
        previous_square=values[at + n] if has_previous else None,
        repeated=mine.repeated,
        digests=mine.digests,
    )


@dataclass
class PendingOwnerReduce:
    """An owner-reduce exchange in flight for ``round`` (phase 1 launched)."""

    round: int
    signals: RoundSignals
    digests: Mapping[int, str]
    """The payload digest each contributor committed to, by cluster (this stage's)."""
    lengths: Sequence[int]
    """The round's per-tensor segment lengths (from the headers)."""
    members: Sequence[int]
    """The quorum's clusters in process-group rank order."""
    cluster: int
    """This process's cluster."""
    group: dist.ProcessGroup | None
    work: dist.Work | None
    received: torch.Tensor
    """Phase 1's output: this owner's share from every member, in member order."""
    started: float
    fetch: PayloadFetch | None = None
    on_done: Callable[[bool], None] | None = None
    own_payload: torch.Tensor | None = None
    bytes_sent: int = 0
    """Bytes this process put on the wire between clusters (all three phases)."""
    exposed_seconds: float = 0.0
    _completed: list[float] = field(default_factory=list)
    _failed: bool = False
    _payloads: dict[int, torch.Tensor] | None = None

    @property
    def contributors(self) -> list[int]:
        return sorted(self.digests)

    @property
    def shares(self) -> list[list[int]]:
        return owner_shares(self.lengths, len(self.digests))

    @property
    def total_seconds(self) -> float:
        return self._completed[-1] - self.started if self._completed else 0.0

    # -- trainer/outer/owner_reduce.OwnerWire --------------------------------------------------

    @property
    def clusters(self) -> list[int]:
        return self.contributors

    @property
    def payload_digests(self) -> list[str]:
        return [self.digests[c] for c in self.contributors]

    @property
    def owner(self) -> int:
        return self.contributors.index(self.cluster)

    def segments(self) -> list[dict[int, torch.Tensor]] | None:
        """Every contributor's segments of this owner's share (cluster order); None when the
        wire failed."""
        if not self._wait_phase_one():
            return None
        share = self.shares[self.owner]
        width = share_bytes(self.lengths, share)
        out, at = [], 0
        for member in self.members:
            if member in self.digests:
                out.append(unpiece(self.received[at : at + width], self.lengths, share))
                at += width
        return out

    def reduce_statistics(
        self, mine: ContributionStatistics | None
    ) -> ContributionStatistics | None:
        """Every owner's statistics summed in owner order -- ``combine_owners``'s floats, bit for
        bit: each sum starts at 0.0 and adds the owners' values in owner order, wherever it
        runs. ``mine`` None: a listener's part (it sends and receives nothing). Only the sums
        travel (float64: exact as computed)."""
        n = len(self.digests)
        contributing = mine is not None and self.cluster in self.digests
        chunks = dict(
            zip(self.contributors, statistics_chunks(statistics_floats(n), n), strict=True)
        )
        starts = {c: sum(chunks[o] for o in self.contributors[:k]) for k, c in enumerate(chunks)}
        own = chunks[self.cluster] if contributing else 0
        # Reduce-scatter: every owner's values of chunk c to c's owner, who sums them.
        values = torch.tensor(_sums(mine) if mine is not None else [], dtype=torch.float64)
        to_owners = [m for m in self.members if contributing and m in chunks]
        parts = [values[starts[m] : starts[m] + chunks[m]] for m in to_owners]
        # Chunk sizes by member: what this process sends to (phase a) and receives from (phase
        # b) each member -- only contributors, and only when this process contributes.
        chunk_splits = [chunks[m] if m in to_owners else 0 for m in self.members]
        own_splits = self._splits(own)
        received = self._all_to_all(
            torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64),
            input_splits=chunk_splits,
            output_splits=own_splits,
            what="statistics",
        )
        if received is None:
            return None
        by_member = dict(zip(self.members, torch.split(received, own_splits), strict=True))
        total = torch.zeros(own, dtype=torch.float64)
        for c in self.contributors if contributing else ():
            total = total + by_member[c]
        # All-gather of the sums, owner c's chunk from c.
        gathered = self._all_to_all(
            total.repeat(len(to_owners)),
            input_splits=[own if m in to_owners else 0 for m in self.members],
            output_splits=chunk_splits,
            what="statistics' sums",
        )
        if gathered is None or mine is None or not contributing:
            return None
        by_member = dict(zip(self.members, torch.split(gathered, chunk_splits), strict=True))
        sums = torch.cat([by_member[c] for c in self.contributors])
        return _from_sums(sums.tolist(), mine)

    def _splits(self, size: int) -> list[int]:
        """``size`` from every contributing member, 0 from the others (member order)."""
        return [size if m in self.digests else 0 for m in self.members]

    def gather_means(self, mine: torch.Tensor | None) -> list[torch.Tensor] | None:
        """Every owner's mean share (owner order; None for a listener, which is sent none);
        ``mine`` None: a listener's or an owner's whose every contribution was excluded. An
        all-to-all in which each owner sends its share to every other contributor: shares of
        different sizes travel unpadded."""
        if self._failed or self.group is None:
            self._failed = True
            return None
        shares = [share_bytes(self.lengths, s) for s in self.shares]
        width = shares[self.owner] if self.cluster in self.digests else 0
        own = mine if mine is not None else torch.zeros(width, dtype=torch.uint8)
        if own.numel() != width:
            raise WorkerError(
                f"round {self.round}: expected a mean share of {width} bytes, got {own.numel()}"
            )
        owned = dict(zip(self.contributors, shares, strict=True))
        listening = self.cluster not in self.digests
        # A listener applies nothing now: it is sent nothing.
        output_splits = [0 if listening else owned.get(m, 0) for m in self.members]
        input_splits = [width if m in self.digests else 0 for m in self.members]
        received = self._all_to_all(
            own.repeat(sum(m in self.digests for m in self.members)),
            input_splits=input_splits,
            output_splits=output_splits,
            what="means",
        )
        if received is None or listening:
            return None
        by_member = dict(zip(self.members, torch.split(received, output_splits), strict=True))
        return [by_member[c].clone() for c in self.contributors]

    def payloads(self) -> list[torch.Tensor]:
        """Every contributor's whole payload, fetched by its signed digest (cluster order)."""
        if self._payloads is None:
            self._failed = True
            own = (
                {self.cluster: self.own_payload}
                if self.own_payload is not None and self.cluster in self.digests
                else {}
            )
            fetched = completed_exchange(
                round=self.round,
                signals=self.signals,
                digests=self.digests,
                length=sum(self.lengths),
                payloads=own,
                fetch=self.fetch,
            )
            self._payloads = fetched.wait()
        return [self._payloads[c] for c in self.contributors]

    # -- a listener ------------------------------------------------------------------------

    def wait(self) -> dict[int, torch.Tensor]:
        """A listener's part: phases 1-3 with nothing of its own (it applies nothing now; a
        cluster catching up fetches the round's payloads afterwards)."""
        self._wait_phase_one()
        if not self._failed:
            self.reduce_statistics(None)
        if not self._failed:
            self.gather_means(None)
        self.finish()
        return {}

    def finish(self) -> None:
        """Tell torchft whether the wire delivered (once)."""
        self._completed.append(time.perf_counter())
        if self.on_done is not None:
            self.on_done(not self._failed)
            self.on_done = None

    # -- helpers -----------------------------------------------------------------------------

    def _wait_phase_one(self) -> bool:
        if self.work is not None:
            before = time.perf_counter()
            try:
                if self.work.wait() is False:
                    self._failed = True
            except RuntimeError as exc:  # a member died or the link broke mid-exchange
                log.warning("round %d: the all-to-all failed (%s)", self.round, exc)
                self._failed = True
            self.work = None
            self._completed.append(time.perf_counter())
            self.exposed_seconds += time.perf_counter() - before
        elif self.group is None:
            self._failed = True
        return not self._failed

    def _all_to_all(
        self, send: torch.Tensor, *, input_splits: list[int], output_splits: list[int], what: str
    ) -> torch.Tensor | None:
        """One blocking ``all_to_all_single`` over the quorum (member order); None, and the
        wire marked failed, when it or an earlier phase failed. Counts what left this process
        for the other members."""
        if self._failed or self.group is None:
            self._failed = True
            return None
        received = torch.empty(sum(output_splits), dtype=send.dtype)
        before = time.perf_counter()
        try:
            work = dist.all_to_all_single(
                received,
                send,
                output_split_sizes=output_splits,
                input_split_sizes=input_splits,
                group=self.group,
                async_op=True,
            )
            assert work is not None  # async_op=True returns the work
            if work.wait() is False:
                self._failed = True
        except RuntimeError as exc:
            log.warning("round %d: the all-to-all of the %s failed (%s)", self.round, what, exc)
            self._failed = True
        self.exposed_seconds += time.perf_counter() - before
        if self._failed:
            return None
        to_self = (
            input_splits[self.members.index(self.cluster)] if self.cluster in self.members else 0
        )
        self.bytes_sent += (sum(input_splits) - to_self) * send.element_size()
        return received


Exchange = PendingExchange | PendingOwnerReduce
"""An exchange in flight, whichever the run's ``OuterConfig.exchange``."""


def start_owner_reduce(
    payload: torch.Tensor | None, wire: RoundWire, *, cluster: int
) -> PendingOwnerReduce:
    """Launch phase 1 for this process's ``payload`` (None: a listener) over the quorum's
    round's ``wire``; the headers of every contributor carry the round's segment lengths."""
    layouts = {tuple(h.segments) for h in wire.headers.values()}
    if len(layouts) != 1 or not next(iter(layouts)):
        raise WorkerError(
            f"round {wire.round}: expected one payload layout from every contributor, got "
            f"{sorted(layouts)}"
        )
    lengths = list(next(iter(layouts)))
    contributors = sorted(wire.headers)
    shares = owner_shares(lengths, len(contributors))
    contributing = payload is not None and cluster in wire.headers
    if contributing:
        assert payload is not None
        if payload.numel() != sum(lengths):
            raise WorkerError(
                f"round {wire.round}: expected a payload of {sum(lengths)} bytes, "
                f"got {payload.numel()}"
            )
    mine = shares[contributors.index(cluster)] if cluster in wire.headers else []
    inputs, input_splits, output_splits = [], [], []
    for member in wire.members:
        if member in wire.headers and contributing:
            assert payload is not None
            part = piece(payload.cpu().contiguous(), lengths, shares[contributors.index(member)])
            inputs.append(part)
            input_splits.append(part.numel())
        else:
            input_splits.append(0)
        output_splits.append(share_bytes(lengths, mine) if member in wire.headers else 0)
    sending = torch.cat(inputs) if inputs else torch.zeros(0, dtype=torch.uint8)
    received = torch.empty(sum(output_splits), dtype=torch.uint8)
    started = time.perf_counter()
    work: dist.Work | None
    try:
        work = dist.all_to_all_single(
            received,
            sending,
            output_split_sizes=output_splits,
            input_split_sizes=input_splits,
            group=wire.group,
            async_op=True,
        )
    except RuntimeError as exc:  # the group broke before the exchange could start
        log.warning("round %d: the all-to-all could not start (%s)", wire.round, exc)
        work = None
    own_share = share_bytes(lengths, mine) if contributing else 0
    pending = PendingOwnerReduce(
        round=wire.round,
        signals=wire.signals,
        digests={c: h.digest for c, h in wire.headers.items()},
        lengths=lengths,
        members=list(wire.members),
        cluster=cluster,
        group=wire.group if work is not None else None,
        work=work,
        received=received,
        started=started,
        fetch=wire.fetch,
        on_done=wire.on_done,
        own_payload=payload.cpu() if contributing and payload is not None else None,
        bytes_sent=int(sending.numel()) - own_share,
    )
    return pending
