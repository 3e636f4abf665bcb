"""Run a function in several spawned processes that form a real gloo group, and collect what
each one reports (tests of collectives that must agree across ranks)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist

RESULT_TIMEOUT_S = 120


def run_gloo_ranks(
    rank_main: Callable[..., Any], world_size: int, tmp_path: Path, *args: Any
) -> dict[int, Any]:
    """``rank_main(*args)`` in each of ``world_size`` processes, inside a gloo group over a file
    store in ``tmp_path``; what each returned (picklable: numpy, not tensors, which would
    travel as shared-memory descriptors lost when the process exits), by rank. Every process
    must exit cleanly."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    store = str(tmp_path / "store")
    processes = [
        context.Process(target=_rank, args=(rank, world_size, store, results, rank_main, args))
        for rank in range(world_size)
    ]
    for process in processes:
        process.start()
    got = dict(results.get(timeout=RESULT_TIMEOUT_S) for _ in processes)
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    return got


def _rank(
    rank: int,
    world_size: int,
    store_path: str,
    results: Any,
    rank_main: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    store = dist.FileStore(store_path, world_size)  # type: ignore[attr-defined]  # public, not re-exported in the stubs
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    try:
        results.put((rank, rank_main(*args)))
    finally:
        dist.destroy_process_group()
