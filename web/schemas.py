"""The JSON documents of the API (``/api/v1``), as pydantic models so that OpenAPI at
``/docs`` describes them exactly. Hashes are lowercase hex throughout (entry leaf hashes,
``prev`` links, proof hashes, roots, object digests); only the signed notes keep C2SP's
base64, inside their own text."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

ResponsesDoc = dict[int | str, dict[str, Any]]
"""The ``responses=`` documentation of a route (status -> OpenAPI response object)."""


class RunSummary(BaseModel):
    """A run and the state of its log."""

    run_id: str
    origin: str = Field(description="C2SP log origin of the run, also the log key's name.")
    status: str = Field(description="`running` or `finished` (a `run.final` entry exists).")
    size: int = Field(
        description="Entries in the log, i.e. the size of the latest signed tree head."
    )
    latest_step: int | None = Field(
        description="Highest outer step recorded, null before the first."
    )
    outer_steps: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class RunList(BaseModel):
    runs: list[RunSummary] = Field(description="Every run, newest first.")


class KeyInfo(BaseModel):
    """A public key enrolled for the run (C2SP verifier-key string)."""

    role: str = Field(
        description="`log` signs tree heads; others: attester, platform, cluster-<j>."
    )
    name: str
    key_id: str = Field(description="C2SP signed-note key id, hex.")
    vkey: str = Field(description="`name+hex(keyid)+base64(0x01 || pubkey)`.")


class TreeHeadInfo(BaseModel):
    size: int
    root_hash: str = Field(description="RFC 9162 root, hex.")
    note: str = Field(
        description="The C2SP tlog-checkpoint as a signed note (also at /log/checkpoint)."
    )


class RunDetail(RunSummary):
    tree_head: TreeHeadInfo = Field(description="The latest signed tree head.")
    keys: list[KeyInfo] = Field(
        description="Keys enrolled for this run; the `log` key verifies tree heads."
    )


class EntryInfo(BaseModel):
    """One log entry. ``body`` is the entry's exact canonical JSON: its UTF-8 bytes are what
    the leaf hash covers (leaf = SHA-256(0x00 || body), RFC 9162 §2.1.1)."""

    index: int
    kind: str
    step: int | None = Field(description="The outer step of an `outer_step` entry, else null.")
    recorded_at: datetime
    leaf_hash: str = Field(description="SHA-256(0x00 || body), hex.")
    body: str = Field(description="The canonical JSON body (RFC 8785), verbatim.")


class EntryPage(BaseModel):
    run_id: str
    start: int
    limit: int
    size: int = Field(description="Entries in the log when this page was read.")
    next_start: int | None = Field(
        description="`start` of the next page; null at the end of the log."
    )
    entries: list[EntryInfo]


class InclusionProofInfo(BaseModel):
    """RFC 9162 §2.1.3 inclusion proof of entry ``index`` in the tree of ``size`` entries."""

    index: int
    size: int
    leaf_hash: str = Field(description="Hex.")
    hashes: list[str] = Field(description="Audit path, hex, leaf sibling first.")
    root_hash: str = Field(description="Root of the tree of `size` entries (as signed), hex.")
    checkpoint_url: str = Field(description="Where the signed tree head of this size is.")


class ConsistencyProofInfo(BaseModel):
    """RFC 9162 §2.1.4 proof that the tree of ``new`` entries extends the tree of ``old``."""

    old: int
    new: int
    hashes: list[str] = Field(description="Hex.")
    old_root: str = Field(description="Hex.")
    new_root: str = Field(description="Hex.")


class MetricSeries(BaseModel):
    key: str
    total: int = Field(description="Points recorded for this key.")
    downsampled: bool = Field(description="True when fewer than `total` points are returned.")
    steps: list[int]
    values: list[float]
    entries: list[int] = Field(
        description="Ledger entry index of each point (its `outer_step` entry)."
    )


class MetricsResponse(BaseModel):
    run_id: str
    max_points: int | None = Field(description="The cap applied per series; null for all points.")
    method: str = Field(description="How series were downsampled.")
    series: list[MetricSeries]


class CheckpointFile(BaseModel):
    name: str
    digest: str = Field(description="SHA-256 of the file, hex; download at `url`.")
    size: int
    url: str = Field(description="`/api/v1/objects/{digest}`.")
    resolve_url: str = Field(description="The same file through the Hugging Face resolve route.")


class CheckpointInfo(BaseModel):
    run_id: str
    step: int = Field(description="Outer step (0-based) whose end state this checkpoint holds.")
    entry_index: int = Field(description="The entry that records this checkpoint.")
    manifest_root: str = Field(
        description="SHA-256 over the files' raw digests in name order (DESIGN.md §4)."
    )
    manifest_object: str = Field(
        description="SHA-256 of the manifest JSON object; download at `/api/v1/objects/{digest}`."
    )
    manifest: dict[str, Any] = Field(
        description="The manifest (OpenSSF model-signing 'files' serialization)."
    )
    files: list[CheckpointFile]


class Health(BaseModel):
    status: str
    database: str
    store: str
