"""Reading the run record (docs/records.md) for the web app: where a step's checkpoint is,
and the entries the page shows.

The web app reads payloads as plain JSON by the keys docs/records.md gives them, so it keeps
working when a recorder adds fields. A field the app needs and cannot find is a
:class:`~web.errors.RecordError` naming the entry and the field, never a ``KeyError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger.envelope import KIND_FINAL, KIND_GENESIS
from ledger.records import EntryRecord
from ledger.service import Ledger
from web.errors import NotFoundError, RecordError

if TYPE_CHECKING:
    from storage import ObjectStore
    from storage.checkpoint import Manifest

GENESIS_INDEX = 0
DATA_MANIFEST_INDEX = 1


@dataclass(frozen=True)
class CheckpointRef:
    """Where the checkpoint of one outer step is recorded and stored."""

    run_id: str
    step: int
    entry_index: int
    """The ``outer_step`` entry that records it."""
    manifest_root: str
    manifest_object: str


def payload_field(entry: EntryRecord, *path: str) -> Any:
    """``entry.payload[path[0]][path[1]]...``, or :class:`RecordError` naming what is missing."""
    value: Any = entry.payload
    for depth, key in enumerate(path):
        if not isinstance(value, dict) or key not in value:
            dotted = ".".join(path[: depth + 1])
            raise RecordError(
                f"run {entry.run_id!r} entry {entry.index} ({entry.kind}): expected payload "
                f"field {dotted!r} (docs/records.md), got none"
            )
        value = value[key]
    return value


def checkpoint_ref(ledger: Ledger, run_id: str, step: int) -> CheckpointRef:
    """The checkpoint written at the end of outer step ``step`` (0-based, docs/records.md).
    Unknown runs and steps raise the ledger's ``NotFoundError`` subclasses."""
    entry = ledger.entry_by_step(run_id, step)
    root = payload_field(entry, "checkpoint", "manifest_root")
    manifest_object = payload_field(entry, "checkpoint", "manifest_object")
    if not (isinstance(root, str) and isinstance(manifest_object, str)):
        raise RecordError(
            f"run {run_id!r} entry {entry.index}: expected checkpoint.manifest_root and "
            f"checkpoint.manifest_object as hex strings, got {root!r} and {manifest_object!r}"
        )
    return CheckpointRef(
        run_id=run_id,
        step=step,
        entry_index=entry.index,
        manifest_root=root,
        manifest_object=manifest_object,
    )


def latest_checkpoint_step(ledger: Ledger, run_id: str) -> int | None:
    """The newest outer step (each has a checkpoint), None before the first. (The state
    before step 0 is fixed by the seed and has no checkpoint.)"""
    return ledger.get_run(run_id).latest_step


def load_manifest(store: ObjectStore, ref: CheckpointRef) -> Manifest:
    """The manifest object of ``ref``, verified (its bytes hash to the digest the entry names)
    and checked to have the root the entry records."""
    # storage.checkpoint loads torch (about 3 s the first time); only manifests need it.
    from storage.checkpoint import read_manifest

    manifest = read_manifest(store, ref.manifest_object)
    if manifest.root != ref.manifest_root:
        raise RecordError(
            f"run {ref.run_id!r} step {ref.step}: expected the manifest object "
            f"{ref.manifest_object} to have root {ref.manifest_root} (entry {ref.entry_index}), "
            f"got {manifest.root}"
        )
    return manifest


def file_digest(manifest: Manifest, ref: CheckpointRef, filename: str) -> str:
    """The SHA-256 of ``filename`` in the checkpoint, or :class:`NotFoundError`."""
    digest = manifest.digests.get(filename)
    if digest is None:
        raise NotFoundError(
            f"run {ref.run_id!r} step {ref.step}: no file {filename!r} in the checkpoint; "
            f"expected one of {sorted(manifest.digests)}"
        )
    return digest


def final_entry(ledger: Ledger, run_id: str, size: int) -> EntryRecord | None:
    """The ``run.final`` entry if the log ends with one."""
    if size < 2:
        return None
    last = ledger.entry(run_id, size - 1)
    return last if last.kind == KIND_FINAL else None


def genesis_entry(ledger: Ledger, run_id: str) -> EntryRecord:
    entry = ledger.entry(run_id, GENESIS_INDEX)
    if entry.kind != KIND_GENESIS:
        raise RecordError(f"run {run_id!r}: expected entry 0 to be {KIND_GENESIS!r}, got {entry.kind!r}")
    return entry
