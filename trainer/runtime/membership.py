"""Which clusters take part in a round, and the process group that connects them: torchft.

Each cluster is one torchft *replica group*: every process of the cluster holds a
``torchft.Manager`` (group rank = its pipeline stage), the cluster's stage-0 process serves its
``ManagerServer``, and the Lighthouse (lighthouse.py) forms quorums from the replica groups that
ask for one and still send heartbeats. For every round a process

1. commits to its payload (exchange.py: the payload is kept and signed, its header posted),
   then sets its manager's step to the round and asks for a quorum (``start_quorum``; torchft's
   own healing is off: a cluster that falls behind catches up from the ledger, below);
2. gets the quorum's members from the process group torchft reconfigures for it -- the
   members' stage-s processes form stage s's group, ranked in cluster order (replica ids sort
   as clusters), so the exchange of each stage shard runs only between its own stage;
3. reads the round's contributors off the channel: the members that posted a header for the
   round (torchft forms a quorum only once every process of every member asked, and each
   asks only once the channel has acknowledged its header -- a store write is otherwise not
   acknowledged, and on a slow link the quorum request could arrive first -- so every member
   sees the same set);
4. after the exchange, reports to its manager whether the wire delivered (``should_commit``):
   a failed exchange makes torchft give the next quorum a new id, so the broken group is
   rebuilt.

A member whose manager step is below the quorum's round is behind (it restarted, or it was
cut off and came back): it takes part as a *listener* (sends zeros, contributes nothing), then
loads the recorded state of that round and contributes from the next one (joining.py).

Bounds (measured in tests/integration/test_membership.py and docs/trainer.md): a cluster that
dies or is cut off stops sending heartbeats and is dropped from the next quorum once the
lighthouse's heartbeat timeout has passed; one that hangs while its heartbeat thread lives on is
dropped after the lighthouse's join timeout; one that dies in the middle of an exchange fails
it at once (connection reset) or after the exchange timeout (cut off), and its payload is then
fetched from where it was kept.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

# torchft logs every quorum from its native side at INFO; RUST_LOG is read when it loads.
os.environ.setdefault("RUST_LOG", "warn")
from torchft import Manager
from torchft.process_group import ProcessGroupGloo

from trainer.errors import WorkerError
from trainer.outer.protocol import RoundSignals
from trainer.runtime.channel import RunChannel
from trainer.runtime.exchange import (
    ContributionHeader,
    ExchangeShard,
    PayloadFetch,
    PendingExchange,
    RoundWire,
    completed_exchange,
    start_exchange,
)
from trainer.runtime.owner_exchange import PendingOwnerReduce, start_owner_reduce

REPLICA_PREFIX = "veritrain_cluster_"
"""torchft replica ids are ``veritrain_cluster_<j, 5 digits>``: they sort as the clusters do,
and torchft's own rank arithmetic reads the trailing digits as the replica's index."""
QUORUM_TIMEOUT = timedelta(hours=1)
"""How long a process waits for a quorum (clusters computing a long round are not late)."""


def replica_id(cluster: int) -> str:
    return f"{REPLICA_PREFIX}{cluster:05d}"


@dataclass(frozen=True, kw_only=True)
class RoundQuorum:
    """One round's membership as every member sees it."""

    id: int
    """torchft's quorum id (it changes whenever the members do, or after a failed exchange)."""
    round: int
    members: tuple[int, ...]
    """Clusters in the quorum, ascending (= process-group rank order)."""
    headers: Mapping[int, ContributionHeader]
    """This stage's header of each contributor: the members that committed to a payload."""

    @property
    def contributors(self) -> tuple[int, ...]:
        return tuple(sorted(self.headers))


@dataclass(frozen=True, kw_only=True)
class ExchangeTerms:
    """How a round's exchange runs, besides its quorum and this process's payload: the same
    for every membership (``Membership.exchange`` in outer_sync.py)."""

    signals: RoundSignals
    """What ``apply`` will need of the round (the quorum's mean train loss)."""
    fetch: PayloadFetch | None
    """Where a payload the wire did not deliver is fetched from (None: nowhere)."""
    owner_reduce: bool = False
    """Combine the payloads by owners (owner_exchange.py) instead of all-gathering them."""


@dataclass(frozen=True, kw_only=True)
class MembershipSettings:
    """How the clusters of a run find each other; the lighthouse's side is in lighthouse.py."""

    lighthouse: str
    """URL of the torchft lighthouse, ``http://host:port``."""
    store_host: str
    """Address of this cluster's store as the other clusters reach it (torchft rendezvous of
    a quorum's process group happens on a member's store)."""
    store_port: int
    advertise_host: str
    """This cluster's address as the other clusters reach it."""
    exchange_timeout: timedelta
    """How long one exchange may take before a silent peer counts as gone."""


class TorchftMembership:
    """One process's torchft manager and the stage's process group it reconfigures."""

    def __init__(
        self,
        *,
        cluster: int,
        stage: int,
        stages: int,
        settings: MembershipSettings,
        channel: RunChannel,
        shard: ExchangeShard | None = None,
    ) -> None:
        """``shard``: this process is replica ``shard.index`` of its stage (data_parallel.py):
        its manager has cluster rank ``index * stages + stage`` of ``stages * count``, and it
        exchanges its 1/count of the stage's payload."""
        # torchft warns on CPU, at every new quorum, that it has no NCCL flight recorder to reset.
        logging.getLogger("torchft").setLevel(logging.ERROR)
        self.cluster, self.stage, self.stages = cluster, stage, stages
        self.channel = channel
        self.shard = shard
        replicas = shard.count if shard is not None else 1
        rank = (shard.index if shard is not None else 0) * stages + stage
        self.group = _QuorumGroup(timeout=settings.exchange_timeout, stages=stages * replicas)
        self.manager = Manager(
            pg=self.group,
            load_state_dict=None,
            state_dict=None,
            min_replica_size=1,
            use_async_quorum=False,
            timeout=settings.exchange_timeout,
            quorum_timeout=QUORUM_TIMEOUT,
            connect_timeout=timedelta(seconds=60),
            rank=rank,
            world_size=stages * replicas,
            store_addr=settings.store_host,
            store_port=settings.store_port,
            lighthouse_addr=settings.lighthouse,
            replica_id=replica_id(cluster),
            hostname=settings.advertise_host,
            init_sync=False,
        )

    def quorum(self, round: int) -> RoundQuorum:
        """Ask for the quorum of ``round`` (this process's step) and read its contributors."""
        self.manager.load_state_dict({"step": round, "batches_committed": 0})
        self.manager.start_quorum(allow_heal=False)
        self.manager.wait_quorum()
        if self.manager.errored() is not None:
            raise WorkerError(
                f"round {round}: torchft could not set up the "
                f"quorum's process group: {self.manager.errored()}"
            )
        members = self.group.members
        latest = {m: self.channel.get(latest_key(m, self.stage)) for m in members}
        current = max((r for r in latest.values() if isinstance(r, int)), default=round)
        headers: dict[int, ContributionHeader] = {}
        for member in members:
            if latest[member] == current:
                message = self.channel.get(header_key(current, member, self.stage))
                if message is not None:
                    headers[member] = ContributionHeader.from_message(message)
        return RoundQuorum(id=self.group.quorum_id, round=current, members=members, headers=headers)

    def exchange(
        self, quorum: RoundQuorum, payload: torch.Tensor | None, terms: ExchangeTerms
    ) -> PendingExchange | PendingOwnerReduce:
        if not quorum.headers:  # nobody contributed to this round: nothing to send
            self._commit(True)
            return completed_exchange(
                round=quorum.round,
                signals=terms.signals,
                digests={},
                length=0,
                payloads={},
                fetch=terms.fetch,
            )
        wire = RoundWire(
            round=quorum.round,
            signals=terms.signals,
            headers=quorum.headers,
            members=quorum.members,
            group=self.group,
            fetch=terms.fetch,
            on_done=self._commit,
        )
        if terms.owner_reduce:
            if self.shard is not None:
                raise WorkerError("the owner-reduce exchange does not split over replicas yet")
            return start_owner_reduce(payload, wire, cluster=self.cluster)
        return start_exchange(payload, wire, shard=self.shard)

    def process_group(self) -> dist.ProcessGroup | None:
        """The stage's group of the current quorum (the AllReduce baseline's gradients)."""
        return self.group

    def _commit(self, delivered: bool) -> None:
        if not delivered:
            self.manager.report_error(RuntimeError("the exchange did not deliver every payload"))
        self.manager.should_commit()

    def close(self) -> None:
        self.manager.shutdown(wait=False)


class LoneMembership:
    """A cluster with nobody to exchange with: a run of one cluster, or one cluster of a
    recorded step re-executed alone. Its quorum is itself, its header its own."""

    def __init__(self, *, cluster: int, stage: int, channel: RunChannel) -> None:
        self.cluster, self.stage, self.channel = cluster, stage, channel

    def quorum(self, round: int) -> RoundQuorum:
        message = self.channel.get(header_key(round, self.cluster, self.stage))
        headers = (
            {self.cluster: ContributionHeader.from_message(message)} if message is not None else {}
        )
        return RoundQuorum(id=0, round=round, members=(self.cluster,), headers=headers)

    def exchange(
        self, quorum: RoundQuorum, payload: torch.Tensor | None, terms: ExchangeTerms
    ) -> PendingExchange:
        header = quorum.headers.get(self.cluster)
        return completed_exchange(
            round=quorum.round,
            signals=terms.signals,
            digests={self.cluster: header.digest} if header is not None else {},
            length=header.length if header is not None else 0,
            payloads={self.cluster: payload} if payload is not None else {},
            fetch=terms.fetch,
        )

    def process_group(self) -> dist.ProcessGroup | None:
        return None

    def close(self) -> None:
        """Nothing to release."""


def header_key(round: int, cluster: int, stage: int) -> str:
    return f"round/{round}/header/{cluster}/{stage}"


def latest_key(cluster: int, stage: int) -> str:
    """The round of the last header (cluster, stage) posted."""
    return f"latest/{cluster}/{stage}"


def post_header(channel: RunChannel, header: ContributionHeader) -> None:
    """Commit to a payload: the header first, then the pointer to it (a reader that sees the
    pointer finds the header). Both are in the store before this returns: the process asks
    for the round's quorum next, and every member must find every other member's header
    once the quorum forms (or the stages of a cluster could count different contributors)."""
    channel.put(header_key(header.round, header.cluster, header.stage), header.to_message())
    channel.put(latest_key(header.cluster, header.stage), header.round, confirmed=True)


class _QuorumGroup(ProcessGroupGloo):  # type: ignore[misc]
    """torchft's reconfigurable gloo group, remembering which clusters each configuration
    holds (torchft hands every configuration the global ranks of the quorum's members)."""

    def __init__(self, *, timeout: timedelta, stages: int) -> None:
        super().__init__(timeout=timeout)
        self._stages = stages
        self.members: tuple[int, ...] = ()
        self.quorum_id = -1

    def configure(
        self,
        store_addr: str,
        replica_id: str,
        rank: int,
        world_size: int,
        quorum_id: int | None = None,
        group_rank: int | None = None,
        group_world_size: int | None = None,
        global_ranks: Sequence[int] | None = None,
    ) -> None:
        if global_ranks is None:
            raise WorkerError("torchft configured the exchange group without its members")
        # global rank = replica index * processes per cluster + cluster rank (torchft's arithmetic
        # on our replica ids; ``stages`` here counts a cluster's processes, S * D)
        self.members = tuple(sorted(r // self._stages for r in global_ranks))
        self.quorum_id = -1 if quorum_id is None else quorum_id
        super().configure(
            store_addr,
            replica_id,
            rank,
            world_size,
            quorum_id,
            group_rank,
            group_world_size,
            list(global_ranks),
        )
