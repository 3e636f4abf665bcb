"""The fallback when no network namespace can be made: a slow link emulated in software.

Used only where ``netns.py`` cannot create namespaces (no root, no CAP_NET_ADMIN): every rank
runs on 127.0.0.1 and this module, installed in each rank process before training, wraps
``torch.distributed.all_reduce`` and ``all_gather`` -- the two collectives that carry the
AllReduce baseline's gradients and the outer exchange. A collective whose group spans more
than one cluster still runs at loopback speed, but its completion is held back until a model
of the cluster's link has carried its bytes:

* each cluster has one egress link of ``rate`` bytes/s, shared by its processes through a
  file (``fcntl`` lock): a transfer starts when the link is free, so the stages of one cluster
  queue behind each other exactly as they would on one uplink;
* the bytes are what a ring algorithm puts on each process's link: ``2(n−1)/n · N`` for an
  all-reduce of ``N`` bytes, ``(n−1) · N`` for an all-gather (trainer/outer/accounting.py);
* a synchronous collective sleeps until its bytes are through; an asynchronous one returns a
  work object whose ``wait`` and future complete then (the runtime times both: exposed and
  total communication stay meaningful).

Collectives inside one cluster (pipeline traffic, the tied-embedding sum) are not touched.
Limits, stated in the report: latency is not modelled, nor TCP dynamics, and collectives that
torch issues internally (``gather_object``'s own calls) bypass the wrappers; they move a few
hundred bytes per outer step.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

ENVIRONMENT = "VERITRAIN_BENCH_SOFTWARE_LINK"
"""``<rate bytes/s>:<cluster>:<folder of the link files>``, set by the launcher."""


@dataclass(frozen=True)
class LinkModel:
    """One cluster's egress link: transfers are served one after another at ``rate``."""

    path: Path
    rate: float
    """Bytes per second."""

    def reserve(self, nbytes: float) -> float:
        """Book ``nbytes`` on the link; the ``time.monotonic()`` (system-wide on Linux) at
        which they will have crossed it."""
        with open(self.path, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            text = handle.read().strip()
            busy_until = float(text) if text else 0.0
            done = max(time.monotonic(), busy_until) + nbytes / self.rate
            handle.seek(0)
            handle.truncate()
            handle.write(repr(done))
            return done


def install_from_environment() -> bool:
    """Install the wrappers if the launcher asked for them (``ENVIRONMENT``); True if it did."""
    spec = os.environ.get(ENVIRONMENT)
    if not spec:
        return False
    rate, cluster, folder = spec.split(":", 2)
    install(LinkModel(Path(folder) / f"cluster-{int(cluster)}.link", float(rate)))
    return True


def install(link: LinkModel) -> None:
    """Wrap ``dist.all_reduce`` and ``dist.all_gather`` of this process (see module docstring)."""
    from torchft.process_group import ProcessGroup as QuorumGroup

    real_all_reduce, real_all_gather = dist.all_reduce, dist.all_gather

    def members(group: Any) -> int:
        """Group size if the group spans clusters -- torchft's group of a quorum; a cluster's
        own groups never do -- else 0 (not shaped)."""
        return group.size() if isinstance(group, QuorumGroup) and group.size() > 1 else 0

    def all_reduce(
        tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any = None, async_op: bool = False
    ) -> Any:
        work = real_all_reduce(tensor, op=op, group=group, async_op=async_op)
        n = members(group)
        if not n:
            return work
        return _held(
            work, link.reserve(2 * (n - 1) / n * tensor.numel() * tensor.element_size()), async_op
        )

    def all_gather(
        tensor_list: list[torch.Tensor],
        tensor: torch.Tensor,
        group: Any = None,
        async_op: bool = False,
    ) -> Any:
        work = real_all_gather(tensor_list, tensor, group=group, async_op=async_op)
        n = members(group)
        if not n:
            return work
        return _held(work, link.reserve((n - 1) * tensor.numel() * tensor.element_size()), async_op)

    dist.all_reduce = all_reduce
    dist.all_gather = all_gather


def _held(work: Any, release: float, async_op: bool) -> Any:
    if not async_op:
        _sleep_until(release)
        return work
    return _HeldWork(work, release)


class _HeldWork:
    """A collective's work whose completion is held until ``release``: ``wait`` blocks and the
    future completes then (what trainer/runtime/exchange.py reads)."""

    def __init__(self, work: Any, release: float) -> None:
        self._work = work
        self._release = release
        self._future: torch.futures.Future[None] = torch.futures.Future()
        threading.Thread(target=self._complete, name="veritrain-link", daemon=True).start()

    def _complete(self) -> None:
        self._work.wait()
        _sleep_until(self._release)
        self._future.set_result(None)

    def wait(self, timeout: Any = None) -> bool:
        self._future.wait()
        return True

    def get_future(self) -> torch.futures.Future[None]:
        return self._future

    def is_completed(self) -> bool:
        return self._future.done()


def _sleep_until(deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)
