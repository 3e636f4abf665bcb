"""What the run page shows, gathered from the ledger (docs/records.md payloads) without
knowing anything about HTML.

Reads a bounded amount per request whatever the length of the run: the genesis and data
manifest entries, one page of the outer-step table (a window of entry indices, newest
first), the final entry, the downsampled chart series, and the cached audit status.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ledger.envelope import KIND_OUTER_STEP
from ledger.errors import LedgerError
from ledger.records import EntryRecord, KeyRecord, RunInfo, SignedTreeHead
from ledger.service import Ledger
from storage import ObjectStore
from storage.errors import StorageError
from web.audit_status import RunStatus, StatusCache
from web.errors import WebError
from web.run_records import (
    DATA_MANIFEST_INDEX,
    checkpoint_ref,
    final_entry,
    genesis_entry,
    load_manifest,
)
from web.series import SeriesCache

ROWS_PER_PAGE = 50
CHART_POINTS = 1000
"""Points per chart series embedded in the page (server-side downsampled)."""

CHARTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("loss", "Loss", ("train_loss", "eval_loss")),
    ("perplexity", "Eval perplexity", ("perplexity",)),
    ("bytes", "Bytes sent per outer step", ("bytes_sent",)),
    ("rank", "Compression rank", ("rank",)),
)
"""(chart id, title, metric keys): what the page charts over outer steps."""
CHART_KEYS = sorted({key for _, _, keys in CHARTS for key in keys})


@dataclass(frozen=True)
class StepRow:
    """One row of the outer-step table."""

    step: int
    entry_index: int
    recorded_at: str
    metrics: Mapping[str, Any]
    tokens: Any
    inner_steps: Any
    compression: Mapping[str, Any]
    manifest_object: str | None
    anomalies: Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class DataSummary:
    """The data manifest as the page shows it."""

    payload: Mapping[str, Any]
    sources: Sequence[Mapping[str, Any]]
    source_bytes: int
    licences: Mapping[str, int]
    """Licence -> number of sources under it."""
    tokenizer: Mapping[str, Any]
    shard_counts: Mapping[str, Mapping[str, int]]
    """split -> {"shards": n, "tokens": t}."""
    other: Mapping[str, Any]
    """Remaining top-level fields of the manifest (a summary manifest has only these)."""


@dataclass(frozen=True)
class CheckpointFile:
    name: str
    digest: str
    size: int


@dataclass(frozen=True)
class LatestCheckpoint:
    """The newest checkpoint's files, or why they could not be listed."""

    step: int
    manifest_root: str | None
    files: Sequence[CheckpointFile]
    problem: str | None = None


@dataclass(frozen=True)
class RunPage:
    run: RunInfo
    head: SignedTreeHead
    status: RunStatus
    keys: Sequence[KeyRecord]
    genesis: Mapping[str, Any]
    genesis_keys: Mapping[str, Any]
    """The genesis' ``keys`` object (apart, since Jinja would read ``genesis.keys`` as the
    dict method)."""
    data: DataSummary | None
    final: Mapping[str, Any] | None
    rows: Sequence[StepRow]
    page: int
    pages: int
    charts: Sequence[tuple[str, str, tuple[str, ...]]]
    chart_data: Mapping[str, Any]
    latest_checkpoint: LatestCheckpoint | None
    """None before the first outer step."""


def run_page(
    ledger: Ledger,
    store: ObjectStore,
    status_cache: StatusCache,
    series_cache: SeriesCache,
    run_id: str,
    page: int,
) -> RunPage:
    """Everything the run page shows for table page ``page`` (1 = newest steps)."""
    run = ledger.get_run(run_id)
    head = ledger.tree_head_at(run_id, run.size)
    pages = max(1, math.ceil(run.size / ROWS_PER_PAGE))
    page = min(max(page, 1), pages)
    data_entry = ledger.entry(run_id, DATA_MANIFEST_INDEX) if run.size > DATA_MANIFEST_INDEX else None
    final = final_entry(ledger, run_id, run.size)
    genesis = genesis_entry(ledger, run_id).payload
    series = series_cache.series(ledger, run_id, CHART_KEYS, CHART_POINTS)
    return RunPage(
        run=run,
        head=head,
        status=status_cache.status(ledger, run_id, run.size),
        keys=ledger.keys(run_id),
        genesis=genesis,
        genesis_keys=_mapping(genesis.get("keys")),
        data=data_summary(data_entry.payload) if data_entry is not None else None,
        final=final.payload if final is not None else None,
        rows=_table_rows(ledger, run_id, run.size, page),
        page=page,
        pages=pages,
        charts=CHARTS,
        chart_data={s.key: {"steps": s.steps, "values": s.values, "total": s.total} for s in series},
        latest_checkpoint=None if run.latest_step is None else latest_checkpoint(ledger, store, run_id, run.latest_step),
    )


def latest_checkpoint(ledger: Ledger, store: ObjectStore, run_id: str, step: int) -> LatestCheckpoint:
    """The files of step ``step``'s checkpoint for download links. A record or store problem
    is shown on the page in place of the list (the rest of the page still renders)."""
    try:
        ref = checkpoint_ref(ledger, run_id, step)
        manifest = load_manifest(store, ref)
        files = [CheckpointFile(e.name, e.digest, store.size(e.digest)) for e in manifest.entries]
    except (WebError, LedgerError, StorageError) as exc:
        return LatestCheckpoint(step=step, manifest_root=None, files=[], problem=str(exc))
    return LatestCheckpoint(step=step, manifest_root=ref.manifest_root, files=files)



def _table_rows(ledger: Ledger, run_id: str, size: int, page: int) -> list[StepRow]:
    # Page p shows the outer steps among entries [size - p*N, size - (p-1)*N): a window of
    # the log, so a page costs one bounded query however long the run is.
    end = size - (page - 1) * ROWS_PER_PAGE
    start = max(0, end - ROWS_PER_PAGE)
    if end <= start:
        return []
    records = ledger.entries(run_id, start, end - start)
    rows = [step_row(r) for r in records if r.kind == KIND_OUTER_STEP and r.step is not None]
    return sorted(rows, key=lambda row: row.step, reverse=True)


def step_row(record: EntryRecord) -> StepRow:
    payload = record.payload
    checkpoint = _mapping(payload.get("checkpoint"))
    tokens = _mapping(payload.get("tokens"))
    anomalies = payload.get("anomalies")
    assert record.step is not None
    return StepRow(
        step=record.step,
        entry_index=record.index,
        recorded_at=record.recorded_at.strftime("%Y-%m-%d %H:%M:%S"),
        metrics=_mapping(payload.get("metrics")),
        tokens=tokens.get("total", tokens.get("step")),
        inner_steps=payload.get("inner_steps"),
        compression=_mapping(payload.get("compression")),
        manifest_object=checkpoint.get("manifest_object"),
        anomalies=[a for a in anomalies if isinstance(a, dict)] if isinstance(anomalies, list) else [],
    )


def data_summary(payload: Mapping[str, Any]) -> DataSummary:
    """Sources, tokenizer and shard counts of a ``data.manifest`` payload, whether it holds
    the full manifest or only a summary of it (docs/records.md)."""
    manifest = _mapping(payload.get("manifest"))
    sources = [s for s in manifest.get("sources", []) if isinstance(s, dict)] if isinstance(manifest.get("sources"), list) else []
    counts: dict[str, dict[str, int]] = {}
    shards = manifest.get("shards")
    if isinstance(shards, list):
        for shard in shards:
            if not isinstance(shard, dict):
                continue
            split = str(shard.get("split", "train"))
            bucket = counts.setdefault(split, {"shards": 0, "tokens": 0})
            bucket["shards"] += 1
            tokens = shard.get("tokens")
            bucket["tokens"] += tokens if isinstance(tokens, int) else 0
    licences: dict[str, int] = {}
    for source in sources:
        licence = str(source.get("license", "unknown"))
        licences[licence] = licences.get(licence, 0) + 1
    shown = {"sources", "shards", "tokenizer"}
    return DataSummary(
        payload=payload,
        sources=sources,
        source_bytes=sum(s["bytes"] for s in sources if isinstance(s.get("bytes"), int)),
        licences=licences,
        tokenizer=_mapping(manifest.get("tokenizer")),
        shard_counts=counts,
        other={k: v for k, v in manifest.items() if k not in shown},
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}
