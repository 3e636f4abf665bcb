"""A Recorder that keeps everything in memory, for tests.

Each process appends what it is given to a shared ``sink`` (a list in one process, or a
``multiprocessing.Manager().list()`` proxy across spawned processes); :class:`MemoryRecording`
reads it back::

    with multiprocessing.get_context("spawn").Manager() as manager:
        sink = manager.list()
        train(config, InMemoryRecorder.factory(sink))
        recording = MemoryRecording(list(sink))
        recording.records[-1].metrics["eval_loss"], recording.state(3).tensors[...]
"""

from __future__ import annotations

import hashlib
from collections.abc import MutableSequence, Sequence
from typing import Any

from records.outer_step import StageContribution
from trainer.checkpoint_layout import CheckpointFiles, FileDigests, JsonFiles, TensorFiles
from trainer.errors import CheckpointError
from trainer.recorder import (
    OuterStepReport,
    ProcessInfo,
    Publication,
    RunStart,
    RunSummary,
    SignsNothing,
)


class InMemoryRecorder(SignsNothing):
    def __init__(self, sink: MutableSequence[Any], process: ProcessInfo) -> None:
        self.sink = sink
        self.process = process

    @classmethod
    def factory(cls, sink: MutableSequence[Any]) -> _Factory:
        return _Factory(sink)

    def begin(self, run: RunStart) -> None:
        self.sink.append(("begin", run))

    def save_state(self, step: int, files: TensorFiles, json_files: JsonFiles) -> FileDigests:
        packed = CheckpointFiles(files, json_files).pack()
        self.sink.append(("state", step, self.process.rank, packed))
        return {name: hashlib.sha256(data).hexdigest() for name, data in packed.items()}

    def publish_contribution(self, published: Publication) -> StageContribution | None:
        """Keep the payload bytes (a re-execution's reproduce compares them with the recorded
        payload, veritrain/audit/reproduce.py); sign nothing."""
        own = published.own
        self.sink.append(("payload", published.step, own.cluster, own.stage, published.payload))
        return None

    def record_outer_step(self, report: OuterStepReport) -> None:
        self.sink.append(("record", report))

    def end(self, summary: RunSummary) -> None:
        self.sink.append(("end", summary))

    def close(self) -> None:
        """Nothing to release."""


class _Factory:
    def __init__(self, sink: MutableSequence[Any]) -> None:
        self.sink = sink

    def __call__(self, process: ProcessInfo) -> InMemoryRecorder:
        return InMemoryRecorder(self.sink, process)


class MemoryRecording:
    """What an ``InMemoryRecorder`` sink holds, by kind."""

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = list(items)

    @property
    def records(self) -> list[OuterStepReport]:
        """Recorded steps in order (the last record of a step wins after a resume)."""
        by_step = {item[1].step: item[1] for item in self.items if item[0] == "record"}
        return [by_step[s] for s in sorted(by_step)]

    def payloads(self, step: int) -> dict[tuple[int, int], bytes]:
        """(cluster, stage) -> the payload bytes each process sent in ``step`` (the last send
        wins after a resume)."""
        return {
            (item[2], item[3]): item[4]
            for item in self.items
            if item[0] == "payload" and item[1] == step
        }

    def state(self, step: int) -> CheckpointFiles:
        """Every process's files of ``step`` (the last save wins after a resume)."""
        packed: dict[str, bytes] = {}
        for item in self.items:
            if item[0] == "state" and item[1] == step:
                packed.update(item[3])
        if not packed:
            raise CheckpointError(f"expected saved files for step {step}, got none")
        return CheckpointFiles.unpack(packed)
