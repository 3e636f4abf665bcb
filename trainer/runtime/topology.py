"""Who runs where: clusters x pipeline stages, and the process groups inside a cluster.

DESIGN.md §6: each cluster is its own ``torch.distributed`` world of S processes, ranked by
pipeline stage. The whole world is the cluster's *pipeline group* (activations and gradients
flow stage to stage); with tied embeddings and S > 1, stage 0 and stage S-1 also form an
*embedding group* to keep their two copies of the matrix equal. Nothing in a cluster's world
reaches another cluster: the outer exchange runs over torchft's process group of each round's
quorum, one per stage (membership.py).

A launch on one host starts several clusters at once: ``present`` names them, and the
launch's processes are numbered ``slot * S + stage`` over them (``place``). A process's
*global rank* ``cluster * S + stage`` names it in seeds and logs whatever the launch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

from trainer.errors import ConfigError

RANK_RULE = "stage in its cluster's own world (global rank = cluster * stages + stage)"
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

    def __post_init__(self) -> None:
        if not self.present or list(self.present) != sorted(set(self.present)):
            raise ConfigError(f"expected present clusters in ascending order, got {self.present}")
        if self.present[0] < 0 or self.present[-1] >= self.clusters:
            raise ConfigError(f"expected present clusters below {self.clusters}, got {self.present}")

    @classmethod
    def full(cls, clusters: int, stages: int) -> Topology:
        return cls(clusters=clusters, stages=stages, present=tuple(range(clusters)))

    @property
    def processes(self) -> int:
        """Processes of this launch."""
        return len(self.present) * self.stages

    def place(self, index: int) -> tuple[int, int]:
        """(cluster, stage) of the launch's process ``index``."""
        if not 0 <= index < self.processes:
            raise ConfigError(f"expected a process index below {self.processes}, got {index}")
        slot, stage = divmod(index, self.stages)
        return self.present[slot], stage

    def global_rank(self, cluster: int, stage: int) -> int:
        return cluster * self.stages + stage

    def to_dict(self) -> dict[str, object]:
        return {
            "clusters": self.clusters,
            "stages": self.stages,
            "world_size": self.clusters * self.stages,
            "rank": RANK_RULE,
            "present": list(self.present),
        }


@dataclass(frozen=True)
class ProcessGroups:
    """The groups of one process inside its cluster (None where a group would be just itself)."""

    pipeline: dist.ProcessGroup
    embedding: dist.ProcessGroup | None


def create_groups(stages: int, stage: int, *, tied_embeddings: bool) -> ProcessGroups:
    """Create the cluster's groups in the same order on every one of its ranks (``new_group``
    is collective over the cluster's world)."""
    world = dist.group.WORLD
    assert world is not None  # the cluster's world exists once init_process_group has run
    embedding = None
    if tied_embeddings and stages > 1:
        group = dist.new_group([0, stages - 1])
        if stage in (0, stages - 1):
            embedding = group
    return ProcessGroups(pipeline=world, embedding=embedding)
