"""Reading the run record for the web app: typed records (records/) from the entries the
signed tree head covers, never from the unsigned summary columns of the ``runs`` row.

A run's state -- running or finished, its latest outer step, how many steps it has -- follows
from the last entry under its latest signed head (a ``run.final`` says how many steps the run
took; an ``outer_step`` says which step it is). A step's checkpoint is found at the step's
place in the log (records.step_entry_index) and checked to be that step's entry. A record that
does not read as its format is a :class:`records.RecordError` naming the entry and the field,
answered 502 (the stored record, not the request, is at fault).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ledger.errors import EntryNotFoundError
from ledger.records import EntryRecord, RunInfo
from ledger.service import Ledger
from records.entry import GENESIS_INDEX, KIND_OUTER_STEP, Record, parse_record, step_entry_index
from records.errors import RecordError
from records.final import RunFinal
from records.genesis import Genesis
from records.outer_step import OuterStep

if TYPE_CHECKING:
    from storage import ObjectStore
    from storage.checkpoint_files import Manifest

STATUS_RUNNING = "running"
STATUS_FINISHED = "finished"
STATUS_UNREADABLE = "unreadable"


def read_record(entry: EntryRecord) -> Record:
    """The typed record of ``entry`` (:class:`RecordError` if malformed)."""
    return parse_record(entry.kind, entry.payload, index=entry.index)


@dataclass(frozen=True)
class RunState:
    """What the signed log says of a run at its latest tree head."""

    run_id: str
    size: int
    status: str
    """``running``, or ``finished`` once the log ends with ``run.final``."""
    latest_step: int | None
    """The last outer step recorded, None before the first."""
    outer_steps: int
    problem: str | None = None
    """Why the last entry cannot be read (status ``unreadable``); None when it can."""


def run_state(ledger: Ledger, info: RunInfo) -> RunState:
    """The state of ``info``'s run from the last entry under its latest signed head."""
    head = ledger.tree_head_at(info.run_id, info.size)
    try:
        last = read_record(ledger.entry(info.run_id, head.size - 1)) if head.size else None
    except RecordError as exc:
        return RunState(info.run_id, head.size, STATUS_UNREADABLE, None, 0, problem=str(exc))
    if isinstance(last, RunFinal):
        latest = last.steps - 1 if last.steps else None
        return RunState(info.run_id, head.size, STATUS_FINISHED, latest, last.steps)
    if isinstance(last, OuterStep):
        return RunState(info.run_id, head.size, STATUS_RUNNING, last.step, last.step + 1)
    return RunState(info.run_id, head.size, STATUS_RUNNING, None, 0)


@dataclass(frozen=True)
class CheckpointRef:
    """Where the checkpoint of one outer step is recorded and stored."""

    run_id: str
    step: int
    entry_index: int
    """The ``outer_step`` entry that records it."""
    manifest_root: str
    manifest_object: str


def step_record(ledger: Ledger, run_id: str, step: int) -> tuple[EntryRecord, OuterStep]:
    """The ``outer_step`` entry of ``step`` and its record, found at the step's place in the
    signed log. Unknown runs and steps raise the ledger's ``NotFoundError`` subclasses."""
    size = ledger.get_run(run_id).size
    index = step_entry_index(step)
    if index >= size:
        raise EntryNotFoundError(f"run {run_id!r} has no outer step {step}")
    entry = ledger.entry(run_id, index)
    if entry.kind != KIND_OUTER_STEP:  # the run.final entry, where step `step` would be next
        raise EntryNotFoundError(f"run {run_id!r} has no outer step {step}")
    record = read_record(entry)
    if not isinstance(record, OuterStep) or record.step != step:
        got = record.step if isinstance(record, OuterStep) else entry.kind
        raise RecordError(
            f"run {run_id!r} entry {index}",
            "step",
            f"outer step {step} at its place in the log",
            got,
        )
    return entry, record


def checkpoint_ref(ledger: Ledger, run_id: str, step: int) -> CheckpointRef:
    """The checkpoint written at the end of outer step ``step`` (0-based, docs/records.md)."""
    entry, record = step_record(ledger, run_id, step)
    return CheckpointRef(
        run_id=run_id,
        step=step,
        entry_index=entry.index,
        manifest_root=record.checkpoint.manifest_root,
        manifest_object=record.checkpoint.manifest_object,
    )


def load_manifest(store: ObjectStore, ref: CheckpointRef) -> Manifest:
    """The manifest object of ``ref``, verified (its bytes hash to the digest the entry names)
    and checked to have the root the entry records."""
    # storage.checkpoint_files loads torch (about 3 s the first time); only manifests need it.
    from storage.checkpoint_files import read_manifest

    manifest = read_manifest(store, ref.manifest_object)
    if manifest.root != ref.manifest_root:
        raise RecordError(
            f"run {ref.run_id!r} step {ref.step} (entry {ref.entry_index})",
            "checkpoint.manifest_object",
            f"a manifest with the recorded root {ref.manifest_root}",
            manifest.root,
        )
    return manifest


def final_record(ledger: Ledger, run_id: str, size: int) -> RunFinal | None:
    """The ``run.final`` record if the log ends with one."""
    if size < 2:
        return None
    last = read_record(ledger.entry(run_id, size - 1))
    return last if isinstance(last, RunFinal) else None


def genesis_record(ledger: Ledger, run_id: str) -> Genesis:
    entry = ledger.entry(run_id, GENESIS_INDEX)
    record = read_record(entry)
    if not isinstance(record, Genesis):
        raise RecordError(
            f"run {run_id!r} entry 0 ({entry.kind})", "", "the run.genesis entry", entry.kind
        )
    return record
