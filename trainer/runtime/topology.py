"""Who runs where: clusters x pipeline stages x data-parallel replicas, and the process groups
inside a cluster.

DESIGN.md §6: each cluster is its own ``torch.distributed`` world of S * D processes; the process of
stage s in replica d has cluster rank ``d * S + s``. Each replica's S processes form a *pipeline
group* (activations and gradients flow stage to stage; with D = 1 it is the whole world); with tied
embeddings and S > 1, a replica's stage 0 and stage S-1 also form an *embedding group* to keep their
two copies of the matrix equal. With D > 1 the D replicas of a stage form its *data group*: they
average gradients every inner step (data_parallel.py). Nothing in a cluster's world reaches another
cluster: the outer exchange runs over torchft's process group of each round's quorum, one per stage
(membership.py).

A launch on one host starts several clusters at once: ``present`` names them, and the
launch's processes are numbered ``(slot * D + replica) * S + stage`` over them (``place``). A
process's *global rank* ``(cluster * D + replica) * S + stage`` names it in seeds and logs
whatever the launch (``cluster * S + stage`` when D = 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch.distributed as dist

from records.genesis import Topology as RunTopology
from trainer.errors import ConfigError

RANK_RULE = "stage in its cluster's own world (global rank = cluster * stages + stage)"
RANK_RULE_DP = (
    "replica * stages + stage in its cluster's own world "
    "(global rank = (cluster * data_parallel + replica) * stages + stage)"
)
"""How the genesis describes ranks (records.genesis.Topology.rank)."""


@dataclass(frozen=True, kw_only=True)
class Topology:
    clusters: int
    """C: clusters in the run at most (the genesis maximum; the data rule's cluster count)."""
    stages: int
    """S: pipeline stages per cluster."""
    present: tuple[int, ...]
    """Clusters with processes in this launch, ascending (all of them on one host; one cluster
    per host otherwise, or the clusters of one recorded step when re-executing it)."""
    data_parallel: int = 1
    """D: data-parallel replicas of each stage in a cluster."""

    def __post_init__(self) -> None:
        if not self.present or list(self.present) != sorted(set(self.present)):
            raise ConfigError(f"expected present clusters in ascending order, got {self.present}")
        if self.present[0] < 0 or self.present[-1] >= self.clusters:
            raise ConfigError(
                f"expected present clusters below {self.clusters}, got {self.present}"
            )

    @classmethod
    def full(cls, clusters: int, stages: int, data_parallel: int = 1) -> Topology:
        return cls(
            clusters=clusters,
            stages=stages,
            present=tuple(range(clusters)),
            data_parallel=data_parallel,
        )

    @property
    def per_cluster(self) -> int:
        """Processes of one cluster: S * D."""
        return self.stages * self.data_parallel

    @property
    def processes(self) -> int:
        """Processes of this launch."""
        return len(self.present) * self.per_cluster

    def place(self, index: int) -> tuple[int, int]:
        """(cluster, stage) of the launch's process ``index``."""
        cluster, stage, _ = self.place_replica(index)
        return cluster, stage

    def place_replica(self, index: int) -> tuple[int, int, int]:
        """(cluster, stage, replica) of the launch's process ``index``."""
        if not 0 <= index < self.processes:
            raise ConfigError(f"expected a process index below {self.processes}, got {index}")
        slot, rank = divmod(index, self.per_cluster)
        replica, stage = divmod(rank, self.stages)
        return self.present[slot], stage, replica

    def cluster_rank(self, stage: int, replica: int = 0) -> int:
        """The process's rank in its cluster's world."""
        return replica * self.stages + stage

    def global_rank(self, cluster: int, stage: int, replica: int = 0) -> int:
        return (cluster * self.data_parallel + replica) * self.stages + stage

    def recorded(self, *, present: Sequence[int], backend: str, device: str) -> RunTopology:
        """The run's topology as its genesis records it, with the clusters that start it
        (``present``), the backend inside each cluster and the device type it trains on."""
        return RunTopology(
            clusters=self.clusters,
            stages=self.stages,
            world_size=self.clusters * self.per_cluster,
            backend=backend,
            device=device,
            rank=RANK_RULE if self.data_parallel == 1 else RANK_RULE_DP,
            present=tuple(present),
            data_parallel=self.data_parallel,
        )


@dataclass(frozen=True)
class ProcessGroups:
    """The groups of one process inside its cluster (None where a group would be just itself)."""

    pipeline: dist.ProcessGroup
    embedding: dist.ProcessGroup | None
    data: dist.ProcessGroup | None = None
    """The stage's D replicas (None when D = 1)."""


def create_groups(
    stages: int, stage: int, *, tied_embeddings: bool, data_parallel: int = 1, replica: int = 0
) -> ProcessGroups:
    """Create the cluster's groups in the same order on every one of its ranks (``new_group``
    is collective over the cluster's world: every rank creates every group)."""
    world = dist.group.WORLD
    assert world is not None  # the cluster's world exists once init_process_group has run
    pipeline: dist.ProcessGroup = world
    if data_parallel > 1:
        for d in range(data_parallel):
            group = dist.new_group([d * stages + s for s in range(stages)])
            if d == replica:
                pipeline = group
    embedding = None
    if tied_embeddings and stages > 1:
        for d in range(data_parallel):
            group = dist.new_group([d * stages, d * stages + stages - 1])
            if d == replica and stage in (0, stages - 1):
                embedding = group
    data = None
    if data_parallel > 1:
        for s in range(stages):
            group = dist.new_group([d * stages + s for d in range(data_parallel)])
            if s == stage:
                data = group
    return ProcessGroups(pipeline=pipeline, embedding=embedding, data=data)
