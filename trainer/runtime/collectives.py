"""Small collectives whose results are identical on every rank, bit for bit.

Floating-point addition is not associative, so a sum whose order depends on the backend's
reduction tree can differ between runs or ranks. These helpers gather the values and reduce
them in group-rank order on every rank instead (cheap: they move scalars and digests).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist


def gather_floats(
    values: Sequence[float], group: dist.ProcessGroup, device: torch.device
) -> list[list[float]]:
    """Every rank's ``values`` (same length everywhere), in group-rank order, as float64."""
    mine = torch.tensor(list(values), dtype=torch.float64, device=device)
    out = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(out, mine, group=group)
    return [t.cpu().tolist() for t in out]


def ordered_sum(values: Sequence[float]) -> float:
    """Left-to-right sum (the order is the contract, not an accident)."""
    total = 0.0
    for value in values:
        total += value
    return total


def broadcast_tensors(
    tensors: Sequence[torch.Tensor], *, source: int, group: dist.ProcessGroup
) -> None:
    """Overwrite ``tensors`` on every rank of ``group`` with global rank ``source``'s values."""
    for tensor in tensors:
        dist.broadcast(tensor.data, src=source, group=group)
