"""Setting a process up to meet the others: the check that its cluster trains on one corpus,
and its connections -- the run channel, the lighthouse's settings, the cluster's heartbeat,
who is still alive, and the membership it exchanges through (torchft's, or a lone cluster's).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

from trainer.data.manifest import DataManifest
from trainer.errors import DataError
from trainer.runtime.channel import ChannelError, Heartbeat, Liveness, RunChannel
from trainer.runtime.exchange import ExchangeShard
from trainer.runtime.launch import Links
from trainer.runtime.lighthouse import SETTINGS_KEY, LighthouseSettings
from trainer.runtime.membership import LoneMembership, MembershipSettings, TorchftMembership
from trainer.runtime.role import ProcessRole
from trainer.runtime.spec import CONNECT_TIMEOUT, START_TIMEOUT
from trainer.runtime.topology import ProcessGroups


def check_same_data(manifest: DataManifest, per_cluster: int) -> None:
    """Every process of the cluster must train on the same corpus bytes (the clusters
    compare with cluster 0 when they join the run). Collective over the cluster's world."""
    digests: list[str | None] = [None] * per_cluster
    dist.all_gather_object(digests, manifest.digest())
    if len(set(digests)) != 1:
        raise DataError(
            "expected every process to build the same corpus, "
            f"got manifest digests {sorted(set(map(str, digests)))}"
            " (different Python versions or data files on different hosts?)"
        )


@dataclass(frozen=True, kw_only=True)
class Connections:
    """How one process reaches the other clusters; ``close`` when the process ends."""

    channel: RunChannel
    settings: LighthouseSettings
    heartbeat: Heartbeat | None
    """Beats for the cluster (its speaker only)."""
    alive: Liveness
    membership: TorchftMembership | LoneMembership

    @classmethod
    def open(
        cls, *, role: ProcessRole, run_id: str, links: Links, groups: ProcessGroups
    ) -> Connections:
        channel = RunChannel(links.channel, run_id, connect_timeout=CONNECT_TIMEOUT)
        settings = _lighthouse_settings(channel, links.lighthouse)
        heartbeat = Heartbeat(channel, role.cluster) if role.speaks_for_cluster else None
        alive = Liveness(channel, settings.heartbeat, grace=START_TIMEOUT)
        membership: TorchftMembership | LoneMembership
        if links.lighthouse is not None and role.exchanges:
            host, port = links.stores[role.cluster]
            membership = TorchftMembership(
                cluster=role.cluster,
                stage=role.stage,
                stages=role.stages,
                settings=MembershipSettings(
                    lighthouse=links.lighthouse,
                    store_host=host,
                    store_port=port,
                    advertise_host=links.advertise_host,
                    exchange_timeout=settings.exchange,
                ),
                channel=channel,
                shard=(
                    ExchangeShard(index=role.replica, count=role.replicas, group=groups.data)
                    if groups.data is not None
                    else None
                ),
            )
        else:
            membership = LoneMembership(cluster=role.cluster, stage=role.stage, channel=channel)
        return cls(
            channel=channel,
            settings=settings,
            heartbeat=heartbeat,
            alive=alive,
            membership=membership,
        )

    def close(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.close()
        self.membership.close()


def _lighthouse_settings(channel: RunChannel, lighthouse: str | None) -> LighthouseSettings:
    if lighthouse is None:
        return LighthouseSettings()
    message = channel.global_message(SETTINGS_KEY)
    if message is None:
        raise ChannelError(
            "the lighthouse published no settings on its channel (is it a veritrain lighthouse?)"
        )
    return LighthouseSettings.from_message(message)
