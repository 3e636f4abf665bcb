"""The tiny preset's overlapped DiLoCoX trained in one process tree for the overlap tests
(test_trainer_overlap.py, test_trainer_short_overlap.py): its configuration, a run recorded in
memory, and a bitwise comparison of saved states."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from trainer.api import train
from trainer.checkpoint_layout import CheckpointFiles
from trainer.config import TrainConfig, with_overrides
from trainer.memory_recorder import InMemoryRecorder, MemoryRecording, shared_sink
from trainer.presets import run_preset

STEPS = 4


def overlapped_config(sync_rounds: int = 0) -> TrainConfig:
    """The tiny preset's DiLoCoX under the one-step delay (the preset has the short overlap),
    its warm-up set to ``sync_rounds`` (the preset has one; the plain one-step delay, from round
    0, is what the other presets run). The held-out loss and
    each contribution's own-data score take 1 batch instead of the preset's 4 and 2: at H = 4
    those forward passes cost about as much CPU as the inner steps, and these tests compare
    bits, not loss levels."""
    config = with_overrides(
        run_preset("tiny"), method="dilocox", outer_steps=STEPS, inner_steps=4, run_id="overlap"
    )
    config = replace(
        config,
        eval_batches=1,
        # The one-step delay: the preset's short overlap is test_trainer_short_overlap.py's.
        outer=replace(
            config.outer, sync_rounds=sync_rounds, apply_delay=None, anomaly_own_batches=1
        ),
    )
    assert config.outer.overlapped
    return config


def run(
    config: TrainConfig, data_dir: Path, resume: CheckpointFiles | None = None
) -> MemoryRecording:
    with shared_sink() as sink:
        train(config, InMemoryRecorder.factory(sink), resume, data_dir=data_dir, quiet=True)
        return MemoryRecording(sink.items())


def assert_same_state(actual: CheckpointFiles, expected: CheckpointFiles) -> None:
    assert actual.names() == expected.names()
    for name, tensors in expected.tensors.items():
        for key, tensor in tensors.items():
            assert torch.equal(actual.tensors[name][key], tensor), f"{name}:{key} differs"
    assert actual.json == expected.json
