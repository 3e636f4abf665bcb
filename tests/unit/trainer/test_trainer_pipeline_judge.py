"""The stages of a cluster combine their verdict statistics over a real gloo group of two
processes: equal rounds sum in stage order, and stages that read different contributors get a
clear error instead of gloo aborting the process."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import torch
import torch.distributed as dist

from trainer.errors import WorkerError
from trainer.outer.verdict import ContributionStatistics
from trainer.runtime.pipeline_judge import combine_stage_statistics


def _statistics(clusters: int, scale: float) -> ContributionStatistics:
    payloads = [[torch.full((4,), scale * (c + 1))] for c in range(clusters)]
    digests = [f"{c:02x}" * 32 for c in range(clusters)]
    return ContributionStatistics.measure(payloads, previous=None, digests=digests)


def _stage(rank: int, store: str, clusters: list[int], results: mp.Queue) -> None:  # type: ignore[type-arg]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        mine = _statistics(clusters[rank], scale=float(rank + 1))
        try:
            combined = combine_stage_statistics(mine, dist.group.WORLD, torch.device("cpu"))
            results.put((rank, "ok", combined.gram, combined.digests))
        except WorkerError as exc:
            results.put((rank, "error", str(exc), None))
    finally:
        dist.destroy_process_group()


def _run(tmp_path: Path, clusters: list[int]) -> dict[int, tuple[str, object, object]]:
    context = mp.get_context("spawn")
    results = context.Queue()
    processes = [
        context.Process(target=_stage, args=(r, str(tmp_path / "store"), clusters, results))
        for r in range(2)
    ]
    for p in processes:
        p.start()
    got = {}
    for _ in processes:
        rank, status, a, b = results.get(timeout=120)
        got[rank] = (status, a, b)
    for p in processes:
        p.join(timeout=60)
        assert p.exitcode == 0
    return got


def test_stages_that_agree_sum_their_statistics(tmp_path: Path) -> None:
    got = _run(tmp_path, [2, 2])
    expected = ContributionStatistics.combine([_statistics(2, 1.0), _statistics(2, 2.0)])
    for rank in (0, 1):
        status, gram, digests = got[rank]
        assert status == "ok"
        assert gram == expected.gram
        assert digests == expected.digests


def test_stages_that_disagree_on_the_contributors_fail_clearly(tmp_path: Path) -> None:
    got = _run(tmp_path, [1, 2])
    for rank in (0, 1):
        status, message, _ = got[rank]
        assert status == "error"
        assert "judge different numbers of contributions" in str(message)
        assert "[1, 2]" in str(message)
