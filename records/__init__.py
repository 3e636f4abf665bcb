"""Typed models of every entry of a run's log (docs/records.md): the one home of each format.

``records`` sits at the bottom of the stack (it imports only ``attestation``): the recorder
builds these models, and the verifier, reproduce, resume and the web app read them. Each has
``to_payload()`` and a ``from_payload()`` that raises one :class:`RecordError` naming the
entry, the field and what was expected. Each format keeps a reader for every schema version it
ever published (records/versions.py), and the genesis names the versioned rules a run is
judged by (records/rules.py): docs/records.md, "Versions".
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
    kinds_at,
    parse_record,
    step_entry_index,
)
from records.errors import RecordError
from records.final import RunFinal
from records.genesis import Genesis, VerificationPolicy
from records.outer_step import OuterStep
from records.rules import Rules
from records.versions import FORMATS, Format, UnsupportedVersion

__all__ = [
    "DATA_MANIFEST_INDEX",
    "FIRST_STEP_INDEX",
    "FORMATS",
    "GENESIS_INDEX",
    "KIND_DATA_MANIFEST",
    "KIND_FINAL",
    "KIND_GENESIS",
    "KIND_OUTER_STEP",
    "DataManifest",
    "DataManifestEntry",
    "DataManifestSummary",
    "Format",
    "Genesis",
    "OuterStep",
    "Record",
    "RecordError",
    "Rules",
    "RunFinal",
    "Shard",
    "Source",
    "UnsupportedVersion",
    "VerificationPolicy",
    "kinds_at",
    "parse_record",
    "step_entry_index",
]
