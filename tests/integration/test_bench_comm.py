"""``veritrain bench comm`` end to end in a tiny mode: the real trainer for all three methods,
the emulated link (network namespaces where they can be made, else the software shaper), the
JSON fields and the plots. Not a timed test: the targets live in the bench's own output."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.config import with_overrides
from trainer.presets import run_preset
from veritrain.bench.comm import CommBenchConfig, Schedule, run_comm_bench
from veritrain.bench.netns import netns_unavailable
from veritrain.bench.throughput import LinkRun, LinkSetup, run_on_link

pytestmark = pytest.mark.integration

TINY = Schedule(
    outer_steps=2,
    inner_steps=4,
    link_outer_steps=3,
    link_diloco_outer_steps=1,
    link_allreduce_inner_steps=2,
    timeout_s=300,
)


def namespaces() -> list[str]:
    """The network namespaces of this process: the bench names them ``vtb<pid's last 5 hex
    digits>-...`` (veritrain/bench/netns.py); tests running beside this one make their own."""
    prefix = f"vtb{f'{os.getpid():x}'[-5:]}-"
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return [line for line in listed.stdout.splitlines() if line.startswith(prefix)]


@pytest.mark.slow
def test_tiny_comm_bench_reports_every_field(tmp_path: Path) -> None:
    before = namespaces() if netns_unavailable() is None else []
    result = run_comm_bench(
        CommBenchConfig(
            custom_schedule=TINY,
            bandwidth_mbit=20.0,
            plots=tmp_path / "plots",
            workdir=tmp_path / "work",
            data_dir=tmp_path / "data",
            rank=12,
            bits=4,
        )
    )
    data = json.loads(json.dumps(result.to_dict()))  # JSON-able as printed by --json
    for field in (
        "bytes_ratio",
        "loss_gap",
        "speedup",
        "exposed_comm_reduction",
        "shaping",
        "link_mbit",
    ):
        assert field in data, field
    assert data["shaping"] == ("netns-tc" if netns_unavailable() is None else "software")
    assert data["link_mbit"] == 20.0 and data["link_derivation"]["given"]
    assert data["dilocox_outer_config"]["rank"] == 12  # --rank reached the DiLoCoX runs
    assert data["dilocox_outer_config"]["bits"] == 4  # and --bits
    assert data["dilocox_outer_config"]["dense_bits"] == 8  # the tiny preset's
    # Every method's loss is held out over every held-out window, not the preset's 4 batches.
    assert data["eval_tokens"] == 504 * 64
    # DiLoCoX sends far fewer bytes than AllReduce for the same tokens, and every method learned.
    assert data["bytes_ratio"] > 10
    methods = data["methods"]
    for name in ("allreduce", "diloco", "dilocox"):
        assert math.isfinite(methods[name]["final_eval_loss"])
        assert methods[name]["tokens"] == methods["allreduce"]["tokens"]  # equal token budgets
        assert methods[name]["tokens_per_s"] > 0
    assert methods["dilocox-blocking"]["exposed_comm_s_per_outer_step"] > 0
    if data["shaping"] == "netns-tc":
        # The preflight transfer crossed the shaped veth: close to the rate asked for, far below
        # what an unshaped veth carries (gigabits).
        assert 0.7 * 20 < data["link_measured_mbit"] < 1.1 * 20
        assert namespaces() == before  # cleaned up
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "bench-exposed.png",
        "bench-loss.png",
        "bench-throughput.png",
    ]
    assert any("bytes_ratio" in line for line in result.lines())


def test_software_shaper_holds_inter_cluster_traffic_to_the_link_rate(tmp_path: Path) -> None:
    """Forced software shaping: a plain DiLoCo exchange (fp32, 0.88 MB per cluster) on a
    4 Mbit/s link cannot complete in less than its bytes / rate. One stage per cluster: the
    exchange is the same whole model, from two processes instead of four."""
    base = run_preset("tiny")
    config = with_overrides(
        base, method="diloco", outer_steps=1, inner_steps=2, stages=1, run_id="software-link"
    )
    from trainer.data.build import prepare_data

    prepare_data(config.data, tmp_path / "data")
    folder = tmp_path / "link"
    folder.mkdir()
    runs = run_on_link(
        [LinkRun("diloco", config)],
        LinkSetup(shaping="software", rate_mbit=4.0, delay_ms=0.0, software_folder=folder),
        data_dir=tmp_path / "data",
        workdir=tmp_path / "work",
        timeout_s=300,
    )
    (only,) = runs["diloco"]
    payload = only.payload_bytes[0]
    assert only.metrics["exposed_comm_seconds"] >= 0.95 * payload * 8 / 4e6


def test_cli_help_lists_the_benchmarks() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "veritrain", "bench", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    for command in ("comm", "ledger", "storage"):
        assert command in completed.stdout
