"""What the ledger's read API returns: plain frozen values, detached from any session, so
the web layer and the verifier can hold them after the transaction has ended; and the
functions that copy them out of the ORM rows."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ledger import models
from ledger.envelope import Envelope, parse_body


@dataclass(frozen=True)
class RunInfo:
    """A run and the state of its log."""

    run_id: str
    origin: str
    """C2SP log origin, also the log key's name."""
    status: str
    """``running`` or ``finished``."""
    size: int
    """Entries in the log (= size of the latest signed tree head)."""
    latest_step: int | None
    outer_steps: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class EntryRecord:
    """One log entry as stored."""

    run_id: str
    index: int
    kind: str
    step: int | None
    body: bytes
    """The canonical JSON body; the leaf hash is SHA-256(0x00 || body)."""
    leaf_hash: bytes
    recorded_at: datetime

    def envelope(self) -> Envelope:
        """The body's fields, checked to be a canonical, well-formed envelope."""
        return parse_body(self.body)

    @property
    def payload(self) -> dict[str, Any]:
        """The caller's object recorded in this entry."""
        payload: dict[str, Any] = json.loads(self.body)["payload"]
        return payload


@dataclass(frozen=True)
class SignedTreeHead:
    """A signed tree head: the run's log at one size."""

    run_id: str
    size: int
    root_hash: bytes
    note: str
    """The C2SP signed checkpoint note."""
    created_at: datetime


@dataclass(frozen=True)
class KeyRecord:
    """A public key enrolled in the ledger."""

    run_id: str | None
    role: str
    name: str
    key_id: str
    vkey: str
    created_at: datetime


@dataclass(frozen=True)
class MetricPoint:
    """One metric value at one outer step."""

    step: int
    key: str
    value: float
    entry_index: int


@dataclass(frozen=True)
class InclusionProof:
    """RFC 9162 inclusion proof of entry ``index`` in the tree of ``size`` entries."""

    index: int
    size: int
    leaf_hash: bytes
    hashes: tuple[bytes, ...]
    root_hash: bytes


@dataclass(frozen=True)
class ConsistencyProof:
    """RFC 9162 proof that the tree of ``new`` entries extends the tree of ``old`` entries."""

    old: int
    new: int
    hashes: tuple[bytes, ...]
    old_root: bytes
    new_root: bytes


@dataclass(frozen=True)
class CosignatureRecord:
    """A witness's verified ``cosignature/v1`` on one of the run's signed tree heads."""

    run_id: str
    size: int
    """Size of the cosigned tree head."""
    root_hash: bytes
    witness_key: str
    """The witness's C2SP verifier key (signature type 0x04)."""
    witness_name: str
    line: str
    """The signature line, ending in a newline, to append to the tree head's note."""
    timestamp: int
    """When the witness cosigned (POSIX seconds, as it signed it)."""
    created_at: datetime
    """When the ledger stored it."""


def run_info(run: models.Run) -> RunInfo:
    return RunInfo(
        run_id=run.id,
        origin=run.origin,
        status=run.status,
        size=run.size,
        latest_step=run.latest_step,
        outer_steps=run.outer_steps,
        created_at=run.created_at,
        updated_at=run.updated_at,
        finished_at=run.finished_at,
    )


def entry_record(entry: models.Entry) -> EntryRecord:
    return EntryRecord(
        run_id=entry.run_id,
        index=entry.index,
        kind=entry.kind,
        step=entry.step,
        body=entry.body,
        leaf_hash=entry.leaf_hash,
        recorded_at=entry.recorded_at,
    )


def head_record(head: models.TreeHead) -> SignedTreeHead:
    return SignedTreeHead(
        run_id=head.run_id,
        size=head.size,
        root_hash=head.root_hash,
        note=head.note,
        created_at=head.created_at,
    )


def metric_point(row: models.Metric) -> MetricPoint:
    return MetricPoint(step=row.step, key=row.key, value=row.value, entry_index=row.entry_index)


def key_record(row: models.EnrolledKey) -> KeyRecord:
    return KeyRecord(
        run_id=row.run_id,
        role=row.role,
        name=row.name,
        key_id=row.key_id,
        vkey=row.vkey,
        created_at=row.created_at,
    )


def cosignature_record(row: models.Cosignature) -> CosignatureRecord:
    return CosignatureRecord(
        run_id=row.run_id,
        size=row.size,
        root_hash=row.root_hash,
        witness_key=row.witness_key,
        witness_name=row.witness_name,
        line=row.line,
        timestamp=row.timestamp,
        created_at=row.created_at,
    )
