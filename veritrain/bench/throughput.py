"""Training runs over the emulated link: every rank its own process, placed in its cluster.

Each cluster is its own torch world and the clusters meet at a lighthouse, exactly as a run on
several hosts does (``veritrain train --cluster J --lighthouse URL``, trainer/runtime/launch.py):
the exchange between clusters runs over torchft's process group of each round's quorum. With
``netns-tc`` shaping each rank is started as ``ip netns exec <its cluster's namespace> python -m
veritrain.bench.rank_main``, with torchrun's variables for its cluster's world (RANK = stage,
MASTER_ADDR = the cluster's own address) and GLOO_SOCKET_IFNAME the namespace's veth, so the
exchange between clusters crosses the shaped link and the traffic inside a cluster stays in its
namespace; cluster 0's stage-0 process serves each run's lighthouse, at cluster 0's address.
With ``software`` shaping every rank runs on 127.0.0.1 and software_shaper.py holds
inter-cluster collectives back instead.

If any rank fails the others are stopped and the failure comes back with the tail of its log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trainer.config import TrainConfig
from veritrain.bench.metrics_recorder import StepMetrics, read_steps
from veritrain.bench.netns import NetnsLink
from veritrain.bench.server import free_port, port_is_free
from veritrain.bench.software_shaper import ENVIRONMENT as SOFTWARE_LINK
from veritrain.errors import BenchError

Shaping = Literal["netns-tc", "software"]
NETNS_BASE_PORT = 29_500
NETNS_LIGHTHOUSE_PORT = 29_600
CLUSTER_VARIABLE = "VERITRAIN_BENCH_CLUSTER"
"""Which cluster a rank process belongs to (its torchrun variables describe its cluster's world)."""


@dataclass(frozen=True, kw_only=True)
class LinkSetup:
    """Where ranks run and how the link between clusters is shaped."""

    shaping: Shaping
    rate_mbit: float
    delay_ms: float
    netns: NetnsLink | None = None
    """The namespaces (``netns-tc`` only)."""
    software_folder: Path | None = None
    """Where the software link keeps its per-cluster state (``software`` only)."""

    def command(self, cluster: int) -> list[str]:
        entry = [sys.executable, "-m", "veritrain.bench.rank_main"]
        if self.netns is None:
            return entry
        return ["ip", "netns", "exec", self.netns.clusters[cluster].namespace, *entry]

    def environment(self, *, stage: int, cluster: int, stages: int) -> dict[str, str]:
        env = {
            "RANK": str(stage),
            "WORLD_SIZE": str(stages),
            "LOCAL_RANK": str(stage),
            "OMP_NUM_THREADS": "1",
            CLUSTER_VARIABLE: str(cluster),
            "MASTER_ADDR": self.address(cluster),
        }
        if self.netns is not None:
            env["GLOO_SOCKET_IFNAME"] = self.netns.clusters[cluster].interface
        else:
            assert self.software_folder is not None  # LinkSetup is built with one or the other
            env["GLOO_SOCKET_IFNAME"] = "lo"
            env[SOFTWARE_LINK] = f"{self.rate_mbit * 1e6 / 8}:{cluster}:{self.software_folder}"
        return env

    def address(self, cluster: int) -> str:
        return self.netns.clusters[cluster].address if self.netns is not None else "127.0.0.1"

    def ports(self, index: int, clusters: int) -> dict[str, Any]:
        """Ports of run ``index``: each cluster's world, and the lighthouse (the channel takes
        the next one). Fixed in fresh namespaces (nothing else listens there), chosen by the OS
        on the shared host."""
        if self.netns is not None:
            return {
                "clusters": [NETNS_BASE_PORT + index] * clusters,
                "lighthouse": NETNS_LIGHTHOUSE_PORT + 2 * index,
            }
        lighthouse = free_port()
        while not port_is_free(lighthouse + 1):
            lighthouse = free_port()
        return {"clusters": [free_port() for _ in range(clusters)], "lighthouse": lighthouse}


@dataclass(frozen=True)
class LinkRun:
    name: str
    config: TrainConfig


def run_on_link(
    runs: Sequence[LinkRun],
    link: LinkSetup,
    *,
    data_dir: Path,
    workdir: Path,
    timeout_s: float,
) -> dict[str, list[StepMetrics]]:
    """Run ``runs`` one after another in one set of rank processes; each run's steps by name."""
    if not runs:
        return {}
    first = runs[0].config
    for run in runs:
        if (run.config.clusters, run.config.stages) != (first.clusters, first.stages):
            raise BenchError(
                f"expected every run on the link to share one topology, got {run.name!r} differing"
            )
    workdir.mkdir(parents=True, exist_ok=True)
    spec = {
        "data_dir": str(data_dir),
        "lighthouse_host": link.address(0),
        "runs": [
            {
                "config": run.config.to_dict(),
                "records": str(workdir / f"{run.name}.jsonl"),
                **link.ports(i, first.clusters),
            }
            for i, run in enumerate(runs)
        ],
    }
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps(spec))
    _launch(
        spec_path,
        link,
        clusters=first.clusters,
        stages=first.stages,
        workdir=workdir,
        timeout_s=timeout_s,
    )
    return {run.name: read_steps(workdir / f"{run.name}.jsonl") for run in runs}


def _launch(
    spec_path: Path, link: LinkSetup, *, clusters: int, stages: int, workdir: Path, timeout_s: float
) -> None:
    processes: list[tuple[int, subprocess.Popen[bytes], Path]] = []
    try:
        for rank in range(clusters * stages):
            cluster, stage = divmod(rank, stages)
            log = workdir / f"rank-{rank}.log"
            env = {**os.environ, **link.environment(stage=stage, cluster=cluster, stages=stages)}
            with open(log, "wb") as output:
                process = subprocess.Popen(
                    [*link.command(cluster), str(spec_path)],
                    env=env,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                )
            processes.append((rank, process, log))
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for _, p, _ in processes):
            failed = next(
                ((r, p, log) for r, p, log in processes if p.returncode not in (None, 0)), None
            )
            if failed is not None:
                raise _failure(*failed)
            if time.monotonic() > deadline:
                raise BenchError(
                    "expected the link run to finish within "
                    f"{timeout_s:.0f} s, it did not (logs in {workdir})"
                )
            time.sleep(0.1)
        for rank, process, log in processes:
            if process.returncode != 0:
                raise _failure(rank, process, log)
    finally:
        for _, process, _ in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def _failure(rank: int, process: subprocess.Popen[bytes], log: Path) -> BenchError:
    """A failed rank, with the tail of its log."""
    tail = log.read_text(errors="replace").strip().splitlines()[-15:]
    return BenchError(
        f"rank {rank} of the link run failed (exit {process.returncode}):\n" + "\n".join(tail)
    )
