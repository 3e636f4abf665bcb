"""One training process of a benchmark run on the emulated link (started by throughput.py).

``python -m veritrain.bench.rank_main SPEC.json`` with torchrun's variables in the
environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, GLOO_SOCKET_IFNAME): the trainer's
``train`` then runs as that one rank (trainer.runtime.launch.under_torchrun). The spec lists
several runs; the same processes run them one after another, each with its own MASTER_PORT,
so the interpreter and torch start once per benchmark rather than once per method.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from trainer.api import train
from trainer.config import TrainConfig
from veritrain.bench.metrics_recorder import MetricsRecorderFactory
from veritrain.bench.software_shaper import install_from_environment


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    install_from_environment()
    for run in spec["runs"]:
        os.environ["MASTER_PORT"] = str(run["master_port"])
        config = TrainConfig.from_dict(run["config"])
        train(config, MetricsRecorderFactory(Path(run["records"])), data_dir=Path(spec["data_dir"]), quiet=True)


if __name__ == "__main__":
    main(sys.argv[1])
