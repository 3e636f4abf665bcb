"""Entry kinds, where each sits in a run's log, and the one dispatch from a kind to its model.

A run's log is ``run.genesis`` (index 0), ``data.manifest`` (index 1), one ``outer_step``
per outer step t = 0, 1, ... at index t + 2, then ``run.final``. ``veritrain verify`` checks
that a run's log has exactly this shape, so a reader may find step t's entry at index t + 2
without trusting any unsigned index of the database.
"""

from __future__ import annotations

from typing import Any

from records.data_manifest import DataManifestEntry
from records.errors import RecordError
from records.final import RunFinal
from records.genesis import Genesis
from records.outer_step import OuterStep

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


def describe(kind: str, index: int | None) -> str:
    return f"entry {index} ({kind})" if index is not None else kind


def parse_record(kind: str, payload: Any, *, index: int | None = None) -> Record:
    """The typed model of an entry's payload; :class:`RecordError` naming the entry and the
    field if it does not have its format's shape, or if the kind is not one of ours."""
    where = describe(kind, index)
    if kind == KIND_GENESIS:
        return Genesis.from_payload(payload, where=where)
    if kind == KIND_DATA_MANIFEST:
        return DataManifestEntry.from_payload(payload, where=where)
    if kind == KIND_OUTER_STEP:
        return OuterStep.from_payload(payload, where=where)
    if kind == KIND_FINAL:
        return RunFinal.from_payload(payload, where=where)
    raise RecordError(
        where,
        "",
        f"one of the kinds {KIND_GENESIS}, {KIND_DATA_MANIFEST}, {KIND_OUTER_STEP}, {KIND_FINAL}",
        kind,
    )
