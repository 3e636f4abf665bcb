"""The outer exchange: every cluster's payload for one stage, gathered over the outer group.

``start`` launches an ``all_gather`` (``async_op=True``) and returns at once; ``wait`` blocks
until it is done and returns the payloads in cluster order. Two clocks per exchange:

* *total* communication seconds: from launch until the backend reports completion (a
  callback on the work's future timestamps it, so it is measured even while compute runs);
* *exposed* seconds: how long ``wait`` actually blocked -- the part of the exchange that the
  one-step-delay overlap (DiLoCoX §3.3) failed to hide. In blocking mode exposed == total.

The payload's length is the same on every cluster for a round (trainer/outer/protocol.py), so
a plain ``all_gather`` of equal-size tensors does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from trainer.outer.protocol import RoundSignals


@dataclass
class PendingExchange:
    """An exchange in flight for ``round``, with the signals ``apply`` will need."""

    round: int
    signals: RoundSignals
    work: dist.Work | None
    """None when there was nothing to send (a lone cluster)."""
    gathered: list[torch.Tensor]
    started: float
    _completed: list[float] = field(default_factory=list)
    exposed_seconds: float = 0.0

    def wait(self) -> list[torch.Tensor]:
        before = time.perf_counter()
        if self.work is not None:
            self.work.wait()
        after = time.perf_counter()
        self.exposed_seconds += after - before
        if not self._completed:  # the callback may not have run yet on some backends
            self._completed.append(after)
        return [t.cpu() for t in self.gathered]

    @property
    def total_seconds(self) -> float:
        """Launch to completion (valid once ``wait`` has returned)."""
        return self._completed[0] - self.started if self._completed else 0.0


def start_exchange(
    payload: torch.Tensor,
    *,
    round: int,
    signals: RoundSignals,
    group: dist.ProcessGroup,
    device: torch.device,
) -> PendingExchange:
    """Launch the all-gather of this cluster's ``payload`` (1-D uint8) over ``group``."""
    tensor = payload.to(device).contiguous()
    gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    started = time.perf_counter()
    work = dist.all_gather(gathered, tensor, group=group, async_op=True)
    assert work is not None  # async_op=True always returns a Work
    pending = PendingExchange(round=round, signals=signals, work=work, gathered=gathered, started=started)
    work.get_future().then(lambda _: pending._completed.append(time.perf_counter()))
    return pending
