"""Entry kinds, where each sits in a run's log, and the one dispatch from a kind to its model.

A run's log is ``run.genesis`` (index 0), ``data.manifest`` (index 1), one ``outer_step``
per outer step t = 0, 1, ... at index t + 2, then ``run.final``. ``veritrain verify`` checks
that a run's log has exactly this shape, so a reader may find step t's entry at index t + 2
without trusting any unsigned index of the database.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from records.data_manifest import DataManifestEntry
from records.errors import RecordError
from records.final import RunFinal
from records.genesis import Genesis
from records.outer_step import OuterStep
from records.versions import DATA_MANIFEST, FINAL, GENESIS, OUTER_STEP, Format

KIND_GENESIS = "run.genesis"
KIND_DATA_MANIFEST = "data.manifest"
KIND_OUTER_STEP = "outer_step"
KIND_FINAL = "run.final"

GENESIS_INDEX = 0
DATA_MANIFEST_INDEX = 1
FIRST_STEP_INDEX = 2

Record = Genesis | DataManifestEntry | OuterStep | RunFinal


def step_entry_index(step: int) -> int:
    """The log index of outer step ``step``'s entry."""
    return FIRST_STEP_INDEX + step


def kinds_at(index: int, *, last: bool) -> tuple[str, ...]:
    """The kinds the entry at ``index`` may have, the expected one first (``last``: it is the
    log's last entry, which may be the ``run.final``)."""
    if index == GENESIS_INDEX:
        return (KIND_GENESIS,)
    if index == DATA_MANIFEST_INDEX:
        return (KIND_DATA_MANIFEST,)
    return (KIND_OUTER_STEP, KIND_FINAL) if last else (KIND_OUTER_STEP,)


def describe(kind: str, index: int | None) -> str:
    return f"entry {index} ({kind})" if index is not None else kind


READERS: Mapping[str, tuple[Format, Callable[..., Record]]] = {
    KIND_GENESIS: (GENESIS, Genesis.from_payload),
    KIND_DATA_MANIFEST: (DATA_MANIFEST, DataManifestEntry.from_payload),
    KIND_OUTER_STEP: (OUTER_STEP, OuterStep.from_payload),
    KIND_FINAL: (FINAL, RunFinal.from_payload),
}
"""Entry kind -> its format (every schema version it reads) and its reader, which reads each of
those versions (records/versions.py)."""


def parse_record(kind: str, payload: Any, *, index: int | None = None) -> Record:
    """The typed model of an entry's payload; :class:`RecordError` naming the entry and the
    field if it does not have its format's shape (:class:`UnsupportedVersion` if its schema
    version is not one this code reads), or if the kind is not one of ours."""
    where = describe(kind, index)
    if kind not in READERS:
        raise RecordError(where, "", f"one of the kinds {', '.join(READERS)}", kind)
    _, read = READERS[kind]
    record: Record = read(payload, where=where)
    return record
