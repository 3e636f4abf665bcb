"""Train into a folder: the local-directory recorder, resuming from the folder's last step.

What ``veritrain train --workdir DIR`` calls (no ledger, no signatures: for experiments).
"""

from __future__ import annotations

import json
from pathlib import Path

from trainer.config import TrainConfig
from trainer.errors import CheckpointError
from trainer.recorder import RunSummary
from veritrain.record.local_recorder import LocalDirectoryRecorder, load_step, resume_directory
from veritrain.record.placement import ClusterPlacement, train_placed


def recorded_config(run_directory: Path) -> TrainConfig:
    """The configuration a run folder was trained with (from its ``run.json``)."""
    path = run_directory / "run.json"
    if not path.is_file():
        raise CheckpointError(
            f"expected run.json in {run_directory} to read the run's configuration, it is missing"
        )
    return TrainConfig.from_dict(json.loads(path.read_text())["config"])


def run_directory_of(path: Path) -> Path:
    """The run folder of a run folder or of one of its step folders."""
    step = resume_directory(path)
    return step.parent.parent


def train_into_directory(
    config: TrainConfig,
    out: Path,
    *,
    resume: Path | None = None,
    data_dir: Path | None = None,
    placement: ClusterPlacement | None = None,
    quiet: bool = False,
) -> RunSummary | None:
    """Train ``config``, recording every outer step under ``out``; with ``resume`` (a run
    folder or a step folder) continue from that recorded step. With ``placement`` this host
    runs one cluster, which writes its own files under ``out`` (a folder every cluster shares,
    or each host's own)."""
    state = load_step(resume_directory(resume)) if resume is not None else None
    factory = LocalDirectoryRecorder.factory(out)
    return train_placed(config, factory, placement, state=state, data_dir=data_dir, quiet=quiet)
