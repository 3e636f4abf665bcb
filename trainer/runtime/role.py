"""Who one process is in its run -- cluster, stage, data-parallel replica -- and the duties
that follow from it in the launch's mode. The worker's collaborators ask this one place.

In every cluster, replica 0's stage 0 *speaks for the cluster*: it beats its heartbeat, posts
the cluster's enrolment and step reports and quotes for it. Cluster 0's speaker *coordinates*:
it begins the run, builds and records every step (one cluster re-executed alone: that
cluster's speaker). A replica other than 0 *follows* its replica 0 (data_parallel.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.runtime.spec import Mode
from trainer.runtime.topology import Topology


@dataclass(frozen=True, kw_only=True)
class ProcessRole:
    index: int
    """The process's index in its launch (topology.py, ``place_replica``)."""
    cluster: int
    stage: int
    replica: int
    stages: int
    replicas: int
    """D, the data-parallel replicas of each stage."""
    mode: Mode
    quiet: bool

    @classmethod
    def of(cls, index: int, topology: Topology, *, mode: Mode, quiet: bool) -> ProcessRole:
        cluster, stage, replica = topology.place_replica(index)
        return cls(
            index=index,
            cluster=cluster,
            stage=stage,
            replica=replica,
            stages=topology.stages,
            replicas=topology.data_parallel,
            mode=mode,
            quiet=quiet,
        )

    @property
    def follower(self) -> bool:
        """A data-parallel replica other than the first: it trains its rows of every batch and
        takes the outer step's result from replica 0, which alone exchanges, records and saves
        (data_parallel.py)."""
        return self.replica > 0

    @property
    def speaks_for_cluster(self) -> bool:
        return self.stage == 0 and not self.follower

    @property
    def coordinating(self) -> bool:
        """Cluster 0's stage 0 records the run (one cluster re-executed alone: its stage 0)."""
        return self.speaks_for_cluster and (self.cluster == 0 or self.mode == "contribute")

    @property
    def exchanges(self) -> bool:
        """Whether the process meets the other clusters (all but one cluster re-executed alone,
        which stops at its contribution)."""
        return self.mode != "contribute"

    @property
    def talkative(self) -> bool:
        """Another cluster's stage 0 says what its cluster does (the coordinator prints the
        steps)."""
        return (
            self.speaks_for_cluster
            and not self.coordinating
            and self.mode == "train"
            and not self.quiet
        )

    def say(self, text: str) -> None:
        if self.talkative:
            print(f"cluster {self.cluster}: {text}", flush=True)
