"""Data parallelism inside a cluster: D replicas of each pipeline stage (topology.py).

* The cluster's batch of an inner step is exactly what the assignment rule gives the cluster
  (trainer/data/assignment.py; the record's data ranges do not depend on D). Replica d trains on
  its rows ``[d * B / D, (d + 1) * B / D)`` (``replica_rows``): contiguous, disjoint, in order.
* After the backward pass the D replicas of a stage average their gradients
  (``average_gradients``). A backend's all-reduce may add in any order, and floating-point
  addition is not associative, so the gradients are all-gathered and summed in replica order
  on every replica instead: every replica gets the same bits, and so does every re-execution.
  Each replica's gradient is that of its rows' mean loss, and the rows are equal in number,
  so the average is the gradient of the cluster batch's mean loss (up to summation order).
* With identical gradients, identical parameters and identical optimiser states, every replica's
  inner step gives the same parameters, and every replica computes the same outer contribution.
  Replica 0 alone keeps, signs and posts it; each replica puts only its 1/D slice of it on the
  wire between clusters and the replicas reassemble the payloads (exchange.py, ``ExchangeShard``);
  replica 0 then broadcasts its parameters and cursor as a guard (replicas.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from trainer.errors import ConfigError


def replica_rows(
    inputs: torch.Tensor, targets: torch.Tensor, *, replica: int, replicas: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Replica ``replica``'s contiguous share of a batch's rows (the batch divides evenly)."""
    rows = inputs.shape[0]
    if rows % replicas:
        raise ConfigError(
            f"expected a batch of a multiple of {replicas} rows for {replicas} replicas, got {rows}"
        )
    share = rows // replicas
    return inputs[replica * share : (replica + 1) * share], targets[
        replica * share : (replica + 1) * share
    ]


def average_gradients(params: Sequence[torch.Tensor], group: dist.ProcessGroup) -> int:
    """Replace each parameter's ``.grad`` by the mean over ``group``'s ranks, summed in group-rank
    order (bitwise the same on every rank). Returns the bytes this rank sent."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0
    flat = torch.cat([g.reshape(-1) for g in grads])
    replicas = dist.get_world_size(group)
    gathered = [torch.empty_like(flat) for _ in range(replicas)]
    dist.all_gather(gathered, flat, group=group)
    total = ordered_tensor_sum(gathered)
    total.div_(replicas)
    offset = 0
    for grad in grads:
        n = grad.numel()
        grad.copy_(total[offset : offset + n].view_as(grad))
        offset += n
    return flat.numel() * flat.element_size()


def ordered_tensor_sum(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Left-to-right elementwise sum (the order is the contract)."""
    total = tensors[0].clone()
    for tensor in tensors[1:]:
        total.add_(tensor)
    return total


def broadcast_from_first(tensors: Sequence[torch.Tensor], group: dist.ProcessGroup) -> None:
    """Overwrite ``tensors`` on every replica with replica 0's (group rank 0)."""
    source = dist.get_global_rank(group, 0)
    for tensor in tensors:
        dist.broadcast(tensor.data, src=source, group=group)
