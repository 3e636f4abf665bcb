"""Who runs where: clusters x pipeline stages, and the process groups that connect them.

DESIGN.md §6: ``rank = cluster * S + stage``. Each cluster's S processes form its *pipeline
group* (activations and gradients flow stage to stage inside a cluster); the processes holding
the same stage in every cluster form that stage's *outer group* (pseudo-gradients, or the
AllReduce baseline's gradients, are exchanged there, so each process only ever exchanges its
own stage's shard). With tied embeddings and S > 1, stage 0 and stage S-1 of a cluster also
form an *embedding group* to keep their two copies of the matrix equal.

A re-execution of one cluster's contribution launches only that cluster: ``present`` names the
clusters that have processes, and ranks are numbered over them in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

from trainer.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Topology:
    clusters: int
    """C: clusters in the run (the outer algorithm's n_clusters)."""
    stages: int
    """S: pipeline stages per cluster."""
    present: tuple[int, ...]
    """Clusters with processes in this launch, ascending (all of them unless re-executing one)."""

    def __post_init__(self) -> None:
        if not self.present or list(self.present) != sorted(set(self.present)):
            raise ConfigError(f"expected present clusters in ascending order, got {self.present}")
        if self.present[0] < 0 or self.present[-1] >= self.clusters:
            raise ConfigError(f"expected present clusters below {self.clusters}, got {self.present}")

    @classmethod
    def full(cls, clusters: int, stages: int) -> Topology:
        return cls(clusters=clusters, stages=stages, present=tuple(range(clusters)))

    @property
    def world_size(self) -> int:
        return len(self.present) * self.stages

    def place(self, rank: int) -> tuple[int, int]:
        """(cluster, stage) of a rank."""
        if not 0 <= rank < self.world_size:
            raise ConfigError(f"expected a rank below {self.world_size}, got {rank}")
        slot, stage = divmod(rank, self.stages)
        return self.present[slot], stage

    def rank_of(self, cluster: int, stage: int) -> int:
        return self.present.index(cluster) * self.stages + stage

    def pipeline_ranks(self, cluster: int) -> list[int]:
        return [self.rank_of(cluster, s) for s in range(self.stages)]

    def outer_ranks(self, stage: int) -> list[int]:
        return [self.rank_of(c, stage) for c in self.present]

    def to_dict(self) -> dict[str, object]:
        return {
            "clusters": self.clusters,
            "stages": self.stages,
            "world_size": self.world_size,
            "rank": "cluster * stages + stage",
            "present": list(self.present),
        }


@dataclass(frozen=True)
class ProcessGroups:
    """The groups one process belongs to (None where a group would be just itself)."""

    pipeline: dist.ProcessGroup
    outer: dist.ProcessGroup | None
    embedding: dist.ProcessGroup | None


def create_groups(topology: Topology, rank: int, *, tied_embeddings: bool) -> ProcessGroups:
    """Create every group in the same order on every rank (``new_group`` is collective)."""
    cluster, stage = topology.place(rank)
    pipeline = outer = embedding = None
    for c in topology.present:
        group = dist.new_group(topology.pipeline_ranks(c))
        if c == cluster:
            pipeline = group
    for s in range(topology.stages):
        group = dist.new_group(topology.outer_ranks(s))
        if s == stage and len(topology.present) > 1:
            outer = group
    if tied_embeddings and topology.stages > 1:
        for c in topology.present:
            group = dist.new_group([topology.rank_of(c, 0), topology.rank_of(c, topology.stages - 1)])
            if c == cluster and stage in (0, topology.stages - 1):
                embedding = group
    assert pipeline is not None  # every present cluster got a pipeline group above
    return ProcessGroups(pipeline=pipeline, outer=outer, embedding=embedding)
