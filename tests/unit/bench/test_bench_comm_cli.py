"""``veritrain bench comm`` refuses settings DiLoCoX cannot send before it trains anything."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from unit.veritrain_in_process import run_veritrain

from trainer.config import with_overrides
from trainer.presets import run_preset
from veritrain.bench.comm import (
    QUICK,
    CommBenchConfig,
    bench_base,
    link_time_limit,
    plan_link_runs,
)
from veritrain.bench.convergence import method_config


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--bits", "3"], "OuterConfig.bits must be one of 2, 4, 8, 16, 32, got 3"),
        (["--dense-bits", "4"], "OuterConfig.dense_bits must be 8 or 16, got 4"),
    ],
)
def test_a_width_the_codec_does_not_send_is_refused_by_name(
    option: list[str], message: str, tmp_path: Path
) -> None:
    completed = run_veritrain(["bench", "comm", "--quick", *option], cwd=tmp_path)
    assert completed.returncode == 2
    assert f"veritrain: error: {message}" in completed.stderr


def test_the_link_runs_get_the_time_their_bytes_need_on_the_link() -> None:
    base = with_overrides(run_preset("qwen2-12m"), clusters=2, stages=2)
    runs = plan_link_runs(base, QUICK)
    parameters = 12_591_744
    limit = link_time_limit(runs, parameters, 1.68, QUICK.timeout_s)
    allreduce_alone = 3 * 2 * 4 * parameters * 8 / 1.68e6 / 2  # 3 inner steps, C = 2
    assert limit > QUICK.timeout_s + 2 * allreduce_alone  # ~13 min of AllReduce, twice over
    # a fast link leaves the schedule's own limit (nearly) as it was
    assert link_time_limit(runs, parameters, 1e6, QUICK.timeout_s) < QUICK.timeout_s + 5


@pytest.mark.parametrize(
    ("clusters", "exchange", "measured"),
    [
        (2, None, "all-gather"),
        (4, None, "owner-reduce"),  # the default from 3 clusters: no --exchange needed
        (4, "all-gather", "all-gather"),
        (2, "owner-reduce", "owner-reduce"),
    ],
)
def test_dilocox_runs_the_exchange_the_cluster_count_or_the_option_names(
    clusters: int, exchange: Literal["all-gather", "owner-reduce"] | None, measured: str
) -> None:
    config = CommBenchConfig(quick=True, clusters=clusters, exchange=exchange)

    dilocox = method_config(bench_base(config), "dilocox").outer

    assert dilocox.exchange_in_use == measured
    # Scores wherever the exchange can compute them, and never with the owner-reduce.
    assert dilocox.contribution_scores is (measured == "all-gather")
