"""One training process of a benchmark run on the emulated link (started by throughput.py).

``python -m veritrain.bench.rank_main SPEC.json`` with torchrun's variables of its cluster's
world in the environment (RANK = stage, WORLD_SIZE = stages, LOCAL_RANK, MASTER_ADDR,
GLOO_SOCKET_IFNAME) and its cluster in ``VERITRAIN_BENCH_CLUSTER``: the trainer's
``train_cluster`` then runs as that one rank of that cluster, meeting the others at the run's
lighthouse (trainer.runtime.launch.under_torchrun), which cluster 0's stage 0 serves. The spec
lists several runs; the same processes run them one after another, each with its own ports,
so the interpreter and torch start once per benchmark rather than once per method.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from trainer.api import train_cluster
from trainer.config import TrainConfig
from trainer.runtime.lighthouse import Lighthouse, LighthouseSettings
from veritrain.bench.metrics_recorder import MetricsRecorderFactory
from veritrain.bench.software_shaper import install_from_environment
from veritrain.bench.throughput import CLUSTER_VARIABLE


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    cluster = int(os.environ[CLUSTER_VARIABLE])
    install_from_environment()
    for run in spec["runs"]:
        os.environ["MASTER_PORT"] = str(run["clusters"][cluster])
        config = TrainConfig.from_dict(run["config"])
        url = f"http://{spec['lighthouse_host']}:{run['lighthouse']}"
        served = None
        if cluster == 0 and os.environ["RANK"] == "0":
            served = Lighthouse(
                host="0.0.0.0",
                port=run["lighthouse"],
                advertise=spec["lighthouse_host"],
                settings=LighthouseSettings(min_clusters=config.clusters),
            )
        try:
            train_cluster(
                config,
                MetricsRecorderFactory(Path(run["records"])),
                cluster=cluster,
                lighthouse=url,
                data_dir=Path(spec["data_dir"]),
                quiet=True,
            )
        finally:
            if served is not None:
                served.close()


if __name__ == "__main__":
    main(sys.argv[1])
