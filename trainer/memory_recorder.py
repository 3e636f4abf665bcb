"""A Recorder that keeps everything in memory: re-executions (``reproduce``, ``bench audit``) and
tests.

Each process appends what it is given to a shared ``sink`` (a list in one process, or a
:class:`FolderSink` across the training processes); :class:`MemoryRecording` reads it back::

    with shared_sink() as sink:
        train(config, InMemoryRecorder.factory(sink))
        recording = MemoryRecording(sink.items())
        recording.records[-1].metrics["eval_loss"], recording.state(3).tensors[...]
"""

from __future__ import annotations

import hashlib
import itertools
import os
import pickle
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

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


class Sink(Protocol):
    """Where an :class:`InMemoryRecorder` puts what it is given (a list, a :class:`FolderSink`)."""

    def append(self, item: Any) -> None: ...


class FolderSink:
    """A sink the training processes share through a private folder: each ``append`` is one
    pickle file, written whole and then renamed into place, named by the system-wide monotonic
    clock so :meth:`items` reads them back in the order they were appended (also across the
    launches of a resumed run).

    It replaces a ``multiprocessing`` manager's list, whose server process had to import torch
    and the trainer to hold the records and then pickled every checkpoint twice more: about
    3 CPU-seconds per re-executed step on 2 cores. The folder is created by :func:`shared_sink`
    (mode 0700) and only this run's processes write to it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._numbers = itertools.count()

    def __getstate__(self) -> dict[str, Any]:
        return {"folder": self.folder}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Each process numbers its own appends; its process id keeps the names apart.
        self.folder = state["folder"]
        self._numbers = itertools.count()

    def append(self, item: Any) -> None:
        name = f"{time.monotonic_ns():020d}-{os.getpid():010d}-{next(self._numbers):08d}"
        partial = self.folder / f".{name}.partial"
        partial.write_bytes(pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL))
        partial.rename(self.folder / f"{name}.pickle")

    def items(self) -> list[Any]:
        return [pickle.loads(p.read_bytes()) for p in sorted(self.folder.glob("*.pickle"))]


@contextmanager
def shared_sink() -> Iterator[FolderSink]:
    """A :class:`FolderSink` in a fresh temporary folder, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="veritrain-recording-") as folder:
        yield FolderSink(Path(folder))


class InMemoryRecorder(SignsNothing):
    def __init__(self, sink: Sink, process: ProcessInfo) -> None:
        self.sink = sink
        self.process = process

    @classmethod
    def factory(cls, sink: Sink) -> _Factory:
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
    def __init__(self, sink: Sink) -> None:
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
