"""The stages of a cluster combine their verdict statistics over a real gloo group of two
processes: equal rounds sum in stage order, and stages that read different contributors get a
clear error instead of gloo aborting the process."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
from unit.trainer.gloo_ranks import run_gloo_ranks

from trainer.errors import WorkerError
from trainer.outer.verdict import ContributionStatistics
from trainer.runtime.pipeline_judge import combine_stage_statistics


def _statistics(clusters: int, scale: float) -> ContributionStatistics:
    payloads = [[torch.full((4,), scale * (c + 1))] for c in range(clusters)]
    digests = [f"{c:02x}" * 32 for c in range(clusters)]
    return ContributionStatistics.measure(payloads, previous=None, digests=digests)


def _stage(clusters: list[int]) -> tuple[str, object, object]:
    rank = dist.get_rank()
    mine = _statistics(clusters[rank], scale=float(rank + 1))
    try:
        combined = combine_stage_statistics(mine, dist.group.WORLD, torch.device("cpu"))
    except WorkerError as exc:
        return "error", str(exc), None
    return "ok", combined.gram, combined.digests


def _run(tmp_path: Path, clusters: list[int]) -> dict[int, tuple[str, object, object]]:
    return run_gloo_ranks(_stage, 2, tmp_path, clusters)


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
