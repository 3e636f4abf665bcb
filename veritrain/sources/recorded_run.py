"""A recorded run as read back from a :class:`~veritrain.sources.RunSource`: its entries, each
with its typed record (records/), and the one place that answers "what does the log say".

``veritrain verify``, ``veritrain reproduce``, ``veritrain train --resume`` and the demo all
read runs through :class:`RecordedRun`. It parses leniently: an entry whose body or payload
is malformed is kept with the reason (naming the entry and the field), so a verifier reports
it under the check it breaks instead of hiding every other result; code that needs a record
asks for it and gets a :class:`RecordedRunError` saying what is missing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from ledger.merkle import leaf_hash
from records import (
    KIND_DATA_MANIFEST,
    KIND_FINAL,
    KIND_GENESIS,
    KIND_OUTER_STEP,
    DataManifestEntry,
    Genesis,
    OuterStep,
    Record,
    RecordError,
    RunFinal,
    parse_record,
)
from veritrain.errors import RecordedRunError

if TYPE_CHECKING:
    from trainer.config import TrainConfig
    from veritrain.sources import RunSource


@dataclass(frozen=True)
class LogEntry:
    """One entry of a run's log as served."""

    index: int
    """Position in the log as served (the body's own ``index`` may disagree if tampered)."""
    body: bytes
    leaf: bytes
    """RFC 9162 leaf hash of the body."""
    kind: str
    """The envelope's kind ('' when the body is not a JSON object)."""
    recorded_at: datetime | None
    record: Record | None
    """The typed payload, or None when :attr:`problem` says why it could not be read."""
    problem: str | None

    @property
    def step(self) -> int | None:
        return self.record.step if isinstance(self.record, OuterStep) else None


@dataclass(frozen=True)
class RecordedRun:
    run_id: str
    entries: tuple[LogEntry, ...]

    @classmethod
    def from_bodies(cls, run_id: str, bodies: list[bytes]) -> RecordedRun:
        return cls(run_id, tuple(_parse(i, b) for i, b in enumerate(bodies)))

    @classmethod
    def load(cls, source: RunSource, run_id: str | None = None) -> RecordedRun:
        """Run ``run_id`` (default: the most recent) as ``source`` serves it."""
        run_id = run_id or source.latest_run_id()
        return cls.from_bodies(run_id, source.entry_bodies(run_id))

    # -- what the log says ----------------------------------------------------------------

    @property
    def genesis_entry(self) -> LogEntry | None:
        first = self.entries[0] if self.entries else None
        return first if first is not None and first.kind == KIND_GENESIS else None

    @property
    def genesis(self) -> Genesis:
        entry = self.genesis_entry
        if entry is None:
            raise RecordedRunError(
                f"run {self.run_id!r}: expected entry 0 to be the {KIND_GENESIS}, it is not"
            )
        if not isinstance(entry.record, Genesis):
            raise RecordedRunError(
                f"run {self.run_id!r}: the genesis cannot be read: {entry.problem}"
            )
        return entry.record

    @property
    def config(self) -> TrainConfig:
        from trainer.config import TrainConfig

        return TrainConfig.from_dict(self.genesis.hyperparameters)

    @property
    def data_manifest_entry(self) -> LogEntry | None:
        return next((e for e in self.entries if e.kind == KIND_DATA_MANIFEST), None)

    @property
    def data_manifest(self) -> DataManifestEntry:
        entry = self.data_manifest_entry
        if entry is None:
            raise RecordedRunError(f"run {self.run_id!r} has no {KIND_DATA_MANIFEST} entry yet")
        if not isinstance(entry.record, DataManifestEntry):
            raise RecordedRunError(
                f"run {self.run_id!r}: the data manifest entry cannot be read: {entry.problem}"
            )
        return entry.record

    @property
    def step_entries(self) -> list[LogEntry]:
        """Every ``outer_step`` entry, readable or not, in log order."""
        return [e for e in self.entries if e.kind == KIND_OUTER_STEP]

    @property
    def outer_steps(self) -> list[tuple[LogEntry, OuterStep]]:
        """The readable ``outer_step`` entries with their records, in log order."""
        return [(e, e.record) for e in self.entries if isinstance(e.record, OuterStep)]

    def step(self, step: int) -> OuterStep:
        for entry in self.step_entries:
            if entry.step == step:
                return entry.record  # type: ignore[return-value]  # step is set only for OuterStep
        steps = [s.step for _, s in self.outer_steps]
        recorded = f"{min(steps)}..{max(steps)}" if steps else "none"
        raise RecordedRunError(
            f"run {self.run_id!r} has no recorded outer step {step} (recorded: {recorded})"
        )

    @property
    def last_step(self) -> int | None:
        steps = [s.step for _, s in self.outer_steps]
        return max(steps) if steps else None

    @property
    def final_entry(self) -> LogEntry | None:
        return next((e for e in self.entries if e.kind == KIND_FINAL), None)

    @property
    def final(self) -> RunFinal | None:
        entry = self.final_entry
        return entry.record if entry is not None and isinstance(entry.record, RunFinal) else None

    def step_of(self, index: int | None) -> int | None:
        if index is None or not 0 <= index < len(self.entries):
            return None
        return self.entries[index].step


def _parse(index: int, body: bytes) -> LogEntry:
    leaf = leaf_hash(body)
    try:
        document = json.loads(body)
    except ValueError as exc:
        return LogEntry(
            index, body, leaf, "", None, None, f"entry {index}: the body is not JSON: {exc}"
        )
    if not isinstance(document, dict):
        return LogEntry(
            index, body, leaf, "", None, None, f"entry {index}: the body is not a JSON object"
        )
    kind = document.get("kind")
    kind = kind if isinstance(kind, str) else ""
    recorded_at = _timestamp(document.get("recorded_at"))
    try:
        record = parse_record(kind, document.get("payload"), index=index)
    except RecordError as exc:
        return LogEntry(index, body, leaf, kind, recorded_at, None, str(exc))
    return LogEntry(index, body, leaf, kind, recorded_at, record, None)


def _timestamp(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None
