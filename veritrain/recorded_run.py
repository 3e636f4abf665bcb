"""Reading a recorded run back from the ledger and the object store: its genesis and
configuration, its outer steps, the state after any step, and its data.

``veritrain train --resume``, ``veritrain reproduce`` and the demo all start here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.envelope import KIND_DATA_MANIFEST, KIND_GENESIS, KIND_OUTER_STEP
from ledger.records import EntryRecord
from ledger.service import Ledger
from storage import ObjectStore
from storage.checkpoint import download_checkpoint
from trainer.checkpoint import CheckpointFiles, load_checkpoint_directory
from trainer.config import TrainConfig
from trainer.data.build import PreparedData
from trainer.data.manifest import DataManifest
from trainer.data.shards import DirectoryShardSource, shard_file_name
from trainer.errors import TrainerError

MAX_DATA_MANIFEST_BYTES = 256 << 20


class RecordedRunError(TrainerError):
    """The ledger does not hold what the caller needs (no such run, no such step)."""


@dataclass(frozen=True)
class RecordedRun:
    run_id: str
    entries: list[EntryRecord]

    @property
    def genesis(self) -> dict[str, Any]:
        first = self.entries[0]
        if first.kind != KIND_GENESIS:
            raise RecordedRunError(f"run {self.run_id!r}: expected entry 0 to be the genesis, got {first.kind!r}")
        return first.payload

    @property
    def config(self) -> TrainConfig:
        return TrainConfig.from_dict(self.genesis["hyperparameters"])

    @property
    def steps(self) -> dict[int, dict[str, Any]]:
        """Outer-step payloads by step."""
        return {int(e.payload["step"]): e.payload for e in self.entries if e.kind == KIND_OUTER_STEP}

    def step(self, step: int) -> dict[str, Any]:
        steps = self.steps
        if step not in steps:
            recorded = f"{min(steps)}..{max(steps)}" if steps else "none"
            raise RecordedRunError(f"run {self.run_id!r} has no recorded outer step {step} (recorded: {recorded})")
        return steps[step]

    @property
    def last_step(self) -> int | None:
        steps = self.steps
        return max(steps) if steps else None

    def data_manifest_entry(self) -> dict[str, Any]:
        for entry in self.entries:
            if entry.kind == KIND_DATA_MANIFEST:
                return entry.payload
        raise RecordedRunError(f"run {self.run_id!r} has no data.manifest entry yet")


def load_recorded_run(ledger: Ledger, run_id: str | None) -> RecordedRun:
    """The run ``run_id`` (or, with None, the most recently created run)."""
    if run_id is None:
        runs = sorted(ledger.list_runs(), key=lambda r: r.created_at)
        if not runs:
            raise RecordedRunError("the ledger has no runs yet: train one with `veritrain train` or `veritrain demo`")
        run_id = runs[-1].run_id
    ledger.get_run(run_id)  # NotFoundError with a clear message for an unknown run
    entries: list[EntryRecord] = []
    while True:
        page = ledger.entries(run_id, start=len(entries), limit=1000)
        if not page:
            break
        entries.extend(page)
    return RecordedRun(run_id=run_id, entries=entries)


def download_state(store: ObjectStore, step_payload: Mapping[str, Any], directory: Path) -> CheckpointFiles:
    """The state recorded after a step, downloaded and verified file by file."""
    download_checkpoint(store, step_payload["checkpoint"]["manifest_object"], directory)
    return load_checkpoint_directory(directory)


def recorded_data(store: ObjectStore, run: RecordedRun, directory: Path) -> PreparedData:
    """The run's data exactly as recorded: its manifest and its shards, downloaded from the
    store (each shard is verified against its digest on the way)."""
    entry = run.data_manifest_entry()
    manifest = DataManifest.from_dict(json.loads(store.read_bytes(entry["manifest_object"], MAX_DATA_MANIFEST_BYTES)))
    directory.mkdir(parents=True, exist_ok=True)
    for shard in manifest.shards:
        target = directory / shard_file_name(shard.sha256)
        if not target.is_file():
            partial = target.with_suffix(".partial")
            with store.open(shard.sha256) as reader, partial.open("wb") as out:
                for chunk in reader:
                    out.write(chunk)
            partial.rename(target)
    return PreparedData(manifest=manifest, source=DirectoryShardSource(directory))
