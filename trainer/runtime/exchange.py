"""The outer exchange of one round: every contributing cluster's payload for one stage.

Before a cluster asks for a round's quorum, each of its processes commits to its payload: it
hands the bytes to its recorder (which keeps them where every cluster and every auditor can
fetch them, and signs their digest with the cluster's key) and posts a
:class:`ContributionHeader` on the run channel. A round's *contributors* are the members of its
quorum that posted a header for that round; every member computes the same set from the
quorum and the channel, with no further message (membership.py).

The payloads then travel as one ``all_gather`` over torchft's process group of the quorum
(``async_op=True``: under the one-step delay it runs while the next round computes). Members
that are only listening (a cluster catching up) send zeros of the same length. ``wait``
returns the contributors' payloads by cluster, each checked against its header's digest; a
payload that did not come through -- its sender died mid-exchange, or the link broke -- is
fetched from where its sender kept it, so every member applies the same payloads whatever the
wire did.

Two clocks per exchange, as before:

* *total* communication seconds: from launch until the backend reports completion (a
  callback on the work's future timestamps it, so it is measured even while compute runs);
* *exposed* seconds: how long ``wait`` actually blocked -- the part of the exchange that the
  one-step-delay overlap (DiLoCoX §3.3) failed to hide. In blocking mode exposed == total.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from trainer.errors import WorkerError
from trainer.outer.protocol import RoundSignals

log = logging.getLogger(__name__)

PayloadFetch = Callable[[str], bytes | None]
"""Where a payload that did not come through the exchange is fetched by digest (None: nowhere)."""


@dataclass(frozen=True, kw_only=True)
class ClusterNumbers:
    """What a cluster measured in a round, identical on each of its processes (gathered over
    the cluster's own world): every cluster learns every contributor's numbers from the headers,
    so decisions that depend on them (the round's signals, adaptive H) agree everywhere."""

    train_loss: float
    """Mean training loss of the round's inner steps (measured on the last stage)."""
    grad_norm: float
    """Gradient norm of the round's last inner step."""
    lr: float
    compute_seconds_per_step: float
    """The slowest stage's compute time per inner step."""
    comm_seconds: float
    """The slowest stage's communication time in the previous outer step."""

    def to_message(self) -> dict[str, float]:
        return {
            "train_loss": self.train_loss,
            "grad_norm": self.grad_norm,
            "lr": self.lr,
            "compute_seconds_per_step": self.compute_seconds_per_step,
            "comm_seconds": self.comm_seconds,
        }

    @classmethod
    def from_message(cls, message: Mapping[str, float]) -> ClusterNumbers:
        return cls(**{k: float(message[k]) for k in cls.__dataclass_fields__})


@dataclass(frozen=True, kw_only=True)
class ContributionHeader:
    """One process's commitment to its payload for one round, posted before the quorum."""

    round: int
    cluster: int
    stage: int
    digest: str
    """Hex SHA-256 of the payload (what the cluster signed)."""
    length: int
    """Bytes of the payload (the same for every contributor of a round)."""
    signature_object: str | None
    """The object of the cluster's signature over the digest (None: the recorder signs nothing)."""
    commitments_object: str | None
    """The object of the stage's per-inner-step commitments the signature also covers (None
    with the signature)."""
    stats: Mapping[str, float]
    """The contribution's own numbers (pseudo-gradient norm, ...)."""
    numbers: ClusterNumbers
    segments: Sequence[int] = ()
    """Bytes of each tensor's segment of the payload (``Contribution.segments``): the splits of
    the owner-reduce exchange (owner_exchange.py), known to every member from the headers."""

    def to_message(self) -> dict[str, object]:
        return {
            "round": self.round,
            "cluster": self.cluster,
            "stage": self.stage,
            "digest": self.digest,
            "length": self.length,
            "signature_object": self.signature_object,
            "commitments_object": self.commitments_object,
            "stats": dict(self.stats),
            "numbers": self.numbers.to_message(),
            "segments": list(self.segments),
        }

    @classmethod
    def from_message(cls, message: Mapping[str, object]) -> ContributionHeader:
        stats = message["stats"]
        numbers = message["numbers"]
        assert isinstance(stats, dict) and isinstance(numbers, dict)  # what to_message wrote
        signature, commitments = message["signature_object"], message["commitments_object"]
        return cls(
            round=int(str(message["round"])),
            cluster=int(str(message["cluster"])),
            stage=int(str(message["stage"])),
            digest=str(message["digest"]),
            length=int(str(message["length"])),
            signature_object=None if signature is None else str(signature),
            commitments_object=None if commitments is None else str(commitments),
            stats={str(k): float(v) for k, v in stats.items()},
            numbers=ClusterNumbers.from_message(numbers),
            segments=[int(str(n)) for n in _list(message.get("segments", []))],
        )


def mean_train_loss(headers: Mapping[int, ContributionHeader]) -> float:
    """The mean over contributors, in cluster order, of each one's training loss: the round's
    signal, computed the same way by every member."""
    total = 0.0
    for cluster in sorted(headers):
        total += headers[cluster].numbers.train_loss
    return total / len(headers)


@dataclass(frozen=True)
class ExchangeShard:
    """Replica ``index`` of ``count`` data-parallel replicas of a stage (data_parallel.py): it
    puts bytes ``[index * n, (index + 1) * n)`` of the stage's payload on the wire between
    clusters (``n = shard_length(length, count)``, the payload zero-padded to ``count * n``),
    and the replicas reassemble every contributor's payload over their ``group``."""

    index: int
    count: int
    group: dist.ProcessGroup


def shard_length(length: int, count: int) -> int:
    """Bytes of one replica's slice of a ``length``-byte payload split ``count`` ways."""
    return -(-length // count)


def payload_slice(payload: torch.Tensor, index: int, count: int) -> torch.Tensor:
    """Slice ``index`` of ``count`` of a 1-D uint8 payload, zero-padded to ``shard_length``."""
    piece = shard_length(payload.numel(), count)
    padded = torch.zeros(piece * count, dtype=torch.uint8)
    padded[: payload.numel()] = payload
    return padded[index * piece : (index + 1) * piece].clone()


def join_slices(slices: Sequence[torch.Tensor], length: int) -> torch.Tensor:
    """The payload of ``length`` bytes whose slices, in replica order, are ``slices``."""
    return torch.cat(list(slices))[:length].contiguous()


@dataclass(frozen=True, kw_only=True)
class RoundWire:
    """What one round's exchange runs over, whichever the run's ``OuterConfig.exchange``
    (``start_exchange`` here, ``start_owner_reduce`` in owner_exchange.py)."""

    round: int
    signals: RoundSignals
    headers: Mapping[int, ContributionHeader]
    """The round's contributors (members that posted a header), by cluster."""
    members: Sequence[int]
    """The quorum's members in group rank order, listeners included."""
    group: dist.ProcessGroup
    fetch: PayloadFetch | None
    """Where a payload the wire did not deliver is fetched from (None: nowhere)."""
    on_done: Callable[[bool], None] | None
    """Told whether the wire delivered every payload (membership.py reports it to torchft)."""


@dataclass
class PendingExchange:
    """An exchange in flight for ``round``, with the signals ``apply`` will need."""

    round: int
    signals: RoundSignals
    digests: Mapping[int, str]
    """The payload digest each contributor committed to, by cluster (this stage's)."""
    length: int
    """Bytes of every contributor's payload."""
    members: Sequence[int]
    """The quorum's clusters in process-group rank order (what ``gathered`` is indexed by)."""
    work: dist.Work | None
    """None when nothing is on the wire (a lone cluster, or payloads already at hand)."""
    gathered: list[torch.Tensor]
    started: float
    fetch: PayloadFetch | None = None
    on_done: Callable[[bool], None] | None = None
    """Told once whether the wire delivered everything (the torchft manager's commit)."""
    shard: ExchangeShard | None = None
    """Set when the wire carried only this replica's slice of each payload."""
    _completed: list[float] = field(default_factory=list)
    exposed_seconds: float = 0.0
    _payloads: dict[int, torch.Tensor] | None = None

    @property
    def contributors(self) -> list[int]:
        return sorted(self.digests)

    def wait(self) -> dict[int, torch.Tensor]:
        """Every contributor's payload for this stage, by cluster, checked against its header."""
        if self._payloads is not None:
            return self._payloads
        before = time.perf_counter()
        delivered = True
        if self.work is not None:
            try:
                delivered = bool(self.work.wait()) is not False
            except RuntimeError as exc:  # a member died or the link broke mid-exchange
                log.warning(
                    "round %d: the exchange failed (%s); fetching the missing payloads",
                    self.round,
                    exc,
                )
                delivered = False
        if self.shard is not None:
            delivered = self._reassemble(delivered)
        after = time.perf_counter()
        self.exposed_seconds += after - before
        if not self._completed:  # the callback may not have run yet on some backends
            self._completed.append(after)
        received = dict(zip(self.members, self.gathered, strict=True)) if delivered else {}
        payloads: dict[int, torch.Tensor] = {}
        for cluster, digest in sorted(self.digests.items()):
            got = received.get(cluster)
            if got is not None and _digest(got) == digest:
                payloads[cluster] = got.cpu()
            else:
                delivered = False
                payloads[cluster] = self._fetched(cluster, digest)
        if self.on_done is not None:
            self.on_done(delivered)
            self.on_done = None
        self._payloads = payloads
        return payloads

    def _reassemble(self, delivered: bool) -> bool:
        """Every replica of the stage holds its slice of each member's payload: gather the
        slices over the stage's replicas (always, so that every replica takes part) and put
        each member's payload back together. A replica whose wire failed sends zeros: the
        digests then disagree and the payload is fetched (``wait``)."""
        assert self.shard is not None
        piece = shard_length(self.length, self.shard.count)
        mine = torch.zeros(len(self.members), piece, dtype=torch.uint8)
        if delivered and self.gathered:
            mine = torch.stack([t.cpu() for t in self.gathered])
        parts = [torch.empty_like(mine) for _ in range(self.shard.count)]
        dist.all_gather(parts, mine, group=self.shard.group)
        self.gathered = [
            join_slices([part[m] for part in parts], self.length) for m in range(len(self.members))
        ]
        return True

    def _fetched(self, cluster: int, digest: str) -> torch.Tensor:
        data = self.fetch(digest) if self.fetch is not None else None
        if data is None:
            raise WorkerError(
                f"round {self.round}: cluster {cluster}'s "
                f"payload {digest[:16]}… did not come through the "
                "exchange and is kept nowhere to fetch it from (only "
                "a recorder with an object store keeps payloads)"
            )
        payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if _digest(payload) != digest or payload.numel() != self.length:
            raise WorkerError(
                f"round {self.round}: fetched payload {digest[:16]}… does not hash to its digest"
            )
        return payload

    @property
    def total_seconds(self) -> float:
        """Launch to completion (valid once ``wait`` has returned)."""
        return self._completed[0] - self.started if self._completed else 0.0


def completed_exchange(
    *,
    round: int,
    signals: RoundSignals,
    digests: Mapping[int, str],
    length: int,
    payloads: Mapping[int, torch.Tensor],
    fetch: PayloadFetch | None,
) -> PendingExchange:
    """An exchange whose payloads are at hand (``payloads``; the others are fetched): a lone
    cluster's own, or a resumed process's, whose checkpoint holds the round's payloads."""
    members = sorted(payloads)
    return PendingExchange(
        round=round,
        signals=signals,
        digests=digests,
        length=length,
        members=members,
        work=None,
        gathered=[payloads[c] for c in members],
        started=time.perf_counter(),
        fetch=fetch,
    )


def start_exchange(
    payload: torch.Tensor | None, wire: RoundWire, *, shard: ExchangeShard | None = None
) -> PendingExchange:
    """Launch the all-gather of this process's ``payload`` (1-D uint8; None: a listener, which
    sends zeros) over the round's ``wire`` -- with ``shard``, of this replica's slice of it."""
    lengths = {h.length for h in wire.headers.values()}
    if len(lengths) != 1:
        raise WorkerError(
            f"round {wire.round}: expected one payload length "
            f"from every contributor, got {sorted(lengths)}"
        )
    length = lengths.pop()
    tensor = (
        payload.cpu().contiguous()
        if payload is not None
        else torch.zeros(length, dtype=torch.uint8)
    )
    if tensor.numel() != length:
        raise WorkerError(
            f"round {wire.round}: expected a payload of {length} bytes, got {tensor.numel()}"
        )
    if shard is not None:
        tensor = payload_slice(tensor, shard.index, shard.count)
    gathered = [torch.empty_like(tensor) for _ in wire.members]
    started = time.perf_counter()
    try:
        work = dist.all_gather(gathered, tensor, group=wire.group, async_op=True)
    except RuntimeError as exc:  # the group broke before the exchange could start
        log.warning(
            "round %d: the exchange could not start (%s); fetching the payloads", wire.round, exc
        )
        work = None
        gathered = []
    pending = PendingExchange(
        round=wire.round,
        signals=wire.signals,
        digests={c: h.digest for c, h in wire.headers.items()},
        length=length,
        members=list(wire.members) if work is not None or shard is not None else [],
        work=work,
        gathered=gathered,
        started=started,
        fetch=wire.fetch,
        on_done=wire.on_done,
        shard=shard,
    )
    if work is not None:
        work.get_future().then(lambda _: pending._completed.append(time.perf_counter()))
    return pending


def _list(value: object) -> list[object]:
    assert isinstance(value, list)  # what to_message wrote
    return value


def _digest(payload: torch.Tensor) -> str:
    data = payload.detach().cpu().contiguous().numpy()
    return hashlib.sha256(data.data).hexdigest()
