"""Starting the processes: spawned on this host, or already started by ``torchrun``.

Spawned (``veritrain train`` on one machine): the parent opens a ``TCPStore`` on 127.0.0.1 with
an OS-chosen free port (no race between picking a port and binding it), starts one process per
rank with ``torch.multiprocessing`` (forkserver start method) and waits; if any process fails, the others are stopped and
the failure comes back as one ``WorkerError`` naming the rank.

``torchrun`` (several hosts): RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT are in
the environment; this process *is* one rank and rendezvous is ``env://``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException

from trainer.errors import ConfigError, WorkerError

Rendezvous = tuple[str, int] | None
"""(host, port) of the parent's store for spawned processes; None means ``env://``."""

TIMEOUT = timedelta(minutes=30)
"""How long a collective may wait for a peer before the process gives up."""

Spec = TypeVar("Spec")


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def torchrun_rank(world_size: int) -> tuple[int, int]:
    """(rank, local rank) of this process under torchrun, checking the world size."""
    given = int(os.environ["WORLD_SIZE"])
    if given != world_size:
        raise ConfigError(
            f"expected WORLD_SIZE = clusters * stages = {world_size}, got {given} from torchrun "
            "(set --nnodes * --nproc-per-node to clusters * stages)"
        )
    return int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))


def init_process_group(backend: str, rank: int, world_size: int, rendezvous: Rendezvous) -> None:
    if rendezvous is None:
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size, timeout=TIMEOUT)
        return
    host, port = rendezvous
    # TCPStore is public API; torch's stubs just do not re-export it from torch.distributed.
    store = dist.TCPStore(host, port, world_size, is_master=False, timeout=TIMEOUT)  # type: ignore[attr-defined]
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=TIMEOUT)


def spawn(entry: Callable[[int, Spec, Rendezvous, Any], None], spec: Spec, world_size: int) -> Any:
    """Run ``entry(rank, spec, rendezvous, results)`` in ``world_size`` spawned processes and
    return what rank 0 put in ``results`` (or None)."""
    # forkserver: one clean server process imports torch and the trainer once, then forks the
    # ranks from it -- every launch after the first skips the imports (seconds per process on
    # a small machine), and no rank inherits the caller's threads or state as plain fork would.
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch.distributed", "trainer.runtime.worker"])
    results = context.SimpleQueue()
    store = dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False, timeout=TIMEOUT
    )
    try:
        mp.start_processes(  # type: ignore[attr-defined,no-untyped-call]
            _in_launch_environment,
            args=(entry, dict(os.environ), spec, ("127.0.0.1", store.port), results),
            nprocs=world_size,
            join=True,
            start_method="forkserver",
        )
    except ProcessRaisedException as exc:
        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise WorkerError(f"training process {exc.error_index} failed: {last}") from exc
    except ProcessExitedException as exc:
        raise WorkerError(f"training process {exc.error_index} exited with code {exc.exit_code}") from exc
    finally:
        del store
    return None if results.empty() else results.get()


def _in_launch_environment(
    rank: int,
    entry: Callable[[int, Spec, Rendezvous, Any], None],
    environment: dict[str, str],
    spec: Spec,
    rendezvous: Rendezvous,
    results: Any,
) -> None:
    """Run ``entry`` with the launcher's environment of *this* launch. A forkserver forks
    ranks from the environment it was started with (at the first launch), so settings changed
    since -- object-store credentials, ``VERITRAIN_*`` -- would otherwise not reach them."""
    os.environ.clear()
    os.environ.update(environment)
    entry(rank, spec, rendezvous, results)
