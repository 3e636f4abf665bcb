"""A Recorder that writes each outer step's files into a folder (no ledger, no object store):
``veritrain train --workdir DIR`` for experiments, and tests that read what a run wrote.

Layout under ``root``::

    run.json                         RunStart (without the shard source), written by begin
    data-manifest.json               the data manifest
    records.jsonl                    one OuterStepReport per line, appended per step
    summary.json                     RunSummary, written by end
    steps/step-000003/
        model-00001-of-00002.safetensors ...   every process's files (save_state)
        model.safetensors.index.json           Hugging Face index of the model files
        config.json, generation_config.json    with the files above: a Hugging Face model repo
        trainer_state.json
        record.json                            written last: the step is complete

Files are written by ``storage.checkpoint_files`` exactly as the ledger-backed recorder writes them
(same bytes, same digests), into a temporary folder and renamed into place, so a killed run
leaves whole files. On a multi-host run each host writes its own processes' files under its
own ``root``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from storage.checkpoint_files import write_files, write_model_index
from storage.checkpoint_files.sharding import header_tensor_sizes, is_model_shard
from trainer.checkpoint_layout import (
    CheckpointFiles,
    FileDigests,
    JsonFiles,
    TensorFiles,
    load_checkpoint_directory,
)
from trainer.data.shards import DirectoryShardSource
from trainer.errors import CheckpointError
from trainer.recorder import OuterStepReport, ProcessInfo, RunStart, RunSummary, SignsNothing

RECORD = "record.json"


def step_directory(root: Path, step: int) -> Path:
    return root / "steps" / f"step-{step:06d}"


def latest_recorded_step(root: Path) -> int | None:
    """The highest step whose ``record.json`` exists under ``root`` (None when there is none)."""
    steps = [
        int(p.parent.name.removeprefix("step-")) for p in (root / "steps").glob(f"step-*/{RECORD}")
    ]
    return max(steps) if steps else None


def resume_directory(path: Path) -> Path:
    """A step folder to resume from: ``path`` itself, or the latest recorded step under a run
    root."""
    if (path / RECORD).is_file():
        return path
    step = latest_recorded_step(path)
    if step is None:
        raise CheckpointError(
            f"expected a recorded step folder or a run folder at {path}, found no {RECORD}"
        )
    return step_directory(path, step)


class LocalDirectoryRecorder(SignsNothing):
    """See the module docstring. Build one per process with :meth:`factory`."""

    def __init__(self, root: Path, process: ProcessInfo) -> None:
        self.root = root
        self.process = process

    @classmethod
    def factory(cls, root: Path) -> _Factory:
        return _Factory(root)

    def begin(self, run: RunStart) -> None:
        shards = run.shard_source
        document = {
            "run_id": run.run_id,
            "config": run.config,
            "config_digest": run.config_digest,
            "topology": run.topology.to_payload(),
            "model": run.model.to_payload(),
            "seed": run.seed,
            "resumed_from_step": run.resumed_from_step,
            "shard_directory": str(shards.directory)
            if isinstance(shards, DirectoryShardSource)
            else None,
        }
        _write_json(self.root / "run.json", document)
        _write_json(self.root / "data-manifest.json", run.data_manifest.to_payload())

    def save_state(self, step: int, files: TensorFiles, json_files: JsonFiles) -> FileDigests:
        directory = step_directory(self.root, step)
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".save-", dir=directory) as folder:
            digests = write_files(folder, tensor_files=files, json_files=json_files)
            for name in digests:
                os.replace(Path(folder) / name, directory / name)
        return digests

    def record_outer_step(self, report: OuterStepReport) -> None:
        directory = step_directory(self.root, report.step)
        shards = {
            path.name: header_tensor_sizes(_file_range(path))
            for path in sorted(directory.glob("*.safetensors"))
            if is_model_shard(path.name)
        }
        if shards:
            with tempfile.TemporaryDirectory(prefix=".index-", dir=directory) as folder:
                for name in write_model_index(folder, shards):
                    os.replace(Path(folder) / name, directory / name)
        # The log line first, record.json last: record.json says the step is complete, so a run
        # killed between the two resumes from the step before and records this one again (the
        # later line wins in read_records), instead of resuming after a step its log lacks.
        payload = report.to_dict()
        with (self.root / "records.jsonl").open("a") as log:
            log.write(json.dumps(payload, sort_keys=True) + "\n")
        _write_json(directory / RECORD, payload)

    def end(self, summary: RunSummary) -> None:
        _write_json(self.root / "summary.json", summary.to_dict())

    def close(self) -> None:
        """Nothing stays open between calls."""


class _Factory:
    """Picklable: spawned processes rebuild the recorder from the root path."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, process: ProcessInfo) -> LocalDirectoryRecorder:
        return LocalDirectoryRecorder(self.root, process)


def read_records(root: Path) -> list[dict[str, Any]]:
    """The records of a run folder, one dict per recorded step, in step order (a resumed run
    may have recorded a step twice: the later line wins)."""
    path = root / "records.jsonl"
    if not path.is_file():
        return []
    by_step: dict[int, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        by_step[int(record["step"])] = record
    return [by_step[s] for s in sorted(by_step)]


def load_step(directory: Path) -> CheckpointFiles:
    """The state files of one step folder (``load_step(step_directory(root, t))``): everything
    but the folder's record.json, which says the step is complete and is not part of it."""
    files = load_checkpoint_directory(directory)
    documents = {name: doc for name, doc in files.json.items() if name != RECORD}
    return CheckpointFiles(files.tensors, documents)


def _file_range(path: Path) -> Callable[[int, int], bytes]:
    def read(start: int, end: int) -> bytes:
        with path.open("rb") as handle:
            handle.seek(start)
            return handle.read(end - start)

    return read


def _write_json(path: Path, document: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with temporary.open("w") as handle:
        handle.write(json.dumps(document, indent=1, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)
