"""Typed models of every entry of a run's log (docs/records.md): the one home of each format.

``records`` sits at the bottom of the stack (it imports only ``attestation``): the recorder
builds these models, and the verifier, reproduce, resume and the web app read them. Each has
``to_payload()`` and a ``from_payload()`` that raises one :class:`RecordError` naming the
entry, the field and what was expected.
"""

from records.data_manifest import (
    DataManifest,
    DataManifestEntry,
    DataManifestSummary,
    Shard,
    Source,
)
from records.entry import (
    DATA_MANIFEST_INDEX,
    FIRST_STEP_INDEX,
    GENESIS_INDEX,
    KIND_DATA_MANIFEST,
    KIND_FINAL,
    KIND_GENESIS,
    KIND_OUTER_STEP,
    Record,
    parse_record,
    step_entry_index,
)
from records.errors import RecordError
from records.final import RunFinal
from records.genesis import Genesis, VerificationPolicy
from records.outer_step import OuterStep

__all__ = [
    "DATA_MANIFEST_INDEX",
    "FIRST_STEP_INDEX",
    "GENESIS_INDEX",
    "KIND_DATA_MANIFEST",
    "KIND_FINAL",
    "KIND_GENESIS",
    "KIND_OUTER_STEP",
    "DataManifest",
    "DataManifestEntry",
    "DataManifestSummary",
    "Genesis",
    "OuterStep",
    "Record",
    "RecordError",
    "RunFinal",
    "Shard",
    "Source",
    "VerificationPolicy",
    "parse_record",
    "step_entry_index",
]
