"""Replica 0 leads, the other replicas of its stage follow (data parallelism inside a cluster,
data_parallel.py): every replica computes the same outer step, replica 0 alone keeps, signs and
posts it, and after the step the others take its parameters and cursor as a guard.

One ``ReplicaGroup`` per process whose stage has D > 1 replicas; its calls are collective over
the stage's replicas and must be made by all of them in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from trainer.errors import WorkerError
from trainer.runtime.data_parallel import broadcast_from_first
from trainer.runtime.state import Cursor


class ReplicaGroup:
    def __init__(self, group: dist.ProcessGroup, *, cluster: int, replica: int) -> None:
        self.group = group
        self.cluster = cluster
        self.replica = replica
        self._first = dist.get_global_rank(group, 0)

    def check_start(self, next_step: int) -> None:
        """Every replica of a stage starts the run at replica 0's step (a replica cannot join
        a run under way on its own)."""
        got: list[Any] = [next_step]
        dist.broadcast_object_list(got, src=self._first, group=self.group)
        if got[0] != next_step:
            raise WorkerError(
                f"cluster {self.cluster} replica {self.replica} "
                f"starts at step {next_step}, replica 0 at step "
                f"{got[0]}: joining a run under way is not implemented with data_parallel > 1"
            )

    def committed(self) -> None:
        """Replica 0 has kept, signed and posted the stage's contribution; the others wait
        for it (they read its header next)."""
        dist.barrier(group=self.group)

    def lead(self, params: Sequence[torch.Tensor], cursor: Cursor) -> None:
        """Replica 0 after its outer step: the other replicas of its stage take its parameters
        and cursor (their inner steps left them equal to replica 0's, the outer step did not)."""
        broadcast_from_first(params, self.group)
        dist.broadcast_object_list([cursor], src=self._first, group=self.group)

    def follow(self, params: Sequence[torch.Tensor]) -> Cursor:
        """A replica other than 0 after its outer step (the same as replica 0's: the same
        parameters, outer state and payloads): take replica 0's cursor and, as a guard, its
        parameters (``lead``)."""
        broadcast_from_first(params, self.group)
        got: list[Any] = [None]
        dist.broadcast_object_list(got, src=self._first, group=self.group)
        cursor: Cursor = got[0]
        return cursor
