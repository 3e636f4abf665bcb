"""What the run page shows, gathered from the ledger's typed records (records/) without
knowing anything about HTML.

Reads a bounded amount per request whatever the length of the run: the genesis and data
manifest entries, one page of the outer-step table (a window of entry indices, newest
first), the final entry, the downsampled chart series, and the cached audit status.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from attestation.enrolment import cluster_fingerprint
from attestation.errors import AttestationError
from ledger.errors import LedgerError
from ledger.records import CosignatureRecord, EntryRecord, KeyRecord, RunInfo, SignedTreeHead
from ledger.service import Ledger
from records import (
    DATA_MANIFEST_INDEX,
    DataManifest,
    DataManifestEntry,
    Genesis,
    OuterStep,
    RecordError,
)
from records.generations import Generations
from storage import ObjectStore
from storage.errors import StorageError
from web.audit_status import RunStatus, StatusCache
from web.errors import WebError
from web.run_records import (
    RunState,
    checkpoint_ref,
    final_record,
    genesis_record,
    load_manifest,
    read_record,
    run_state,
)
from web.series import SeriesCache

T = TypeVar("T")
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
    record: OuterStep


@dataclass(frozen=True)
class DataSummary:
    """The data manifest as the page shows it."""

    manifest_object: str
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
    state: RunState
    """Status and steps as the signed log says (not the unsigned ``runs`` row)."""
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
    problems: Sequence[str]
    """Entries that do not read as their format (the rest of the page still renders)."""
    generations: Mapping[int, Generations | None]
    """What the model said after each step of the table's page (None: unreadable)."""
    cosigners: Sequence[CosignatureRecord]
    """The witnesses that cosigned the latest signed tree head (verified when stored)."""
    cluster_fingerprints: Mapping[int, str] = field(default_factory=dict)
    """Each cluster's enrolled keys as one fingerprint, for its operator to compare with
    ``veritrain cluster-keys`` (attestation/enrolment.py)."""


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
    state = run_state(ledger, run)
    head = ledger.tree_head_at(run_id, state.size)
    pages = max(1, math.ceil(state.size / ROWS_PER_PAGE))
    page = min(max(page, 1), pages)
    problems = [state.problem] if state.problem else []

    def readable(read: Callable[[], T]) -> T | None:
        try:
            return read()
        except RecordError as exc:
            problems.append(str(exc))
            return None

    data = (
        readable(lambda: _data_entry(ledger, run_id)) if state.size > DATA_MANIFEST_INDEX else None
    )
    final = readable(lambda: final_record(ledger, run_id, state.size))
    genesis_model = readable(lambda: genesis_record(ledger, run_id))
    genesis = genesis_model.to_payload() if genesis_model is not None else {}
    rows = _table_rows(ledger, run_id, state.size, page, problems)
    said = {row.step: _generations(store, row, problems) for row in rows}
    series = series_cache.series(ledger, run_id, CHART_KEYS, CHART_POINTS)
    return RunPage(
        run=run,
        state=state,
        head=head,
        status=status_cache.status(ledger, run_id, state.size),
        keys=ledger.keys(run_id),
        genesis=genesis,
        genesis_keys=_mapping(genesis.get("keys")),
        cluster_fingerprints=_cluster_fingerprints(genesis_model),
        data=data_summary(data) if data is not None else None,
        final=final.to_payload() if final is not None else None,
        rows=rows,
        page=page,
        pages=pages,
        charts=CHARTS,
        chart_data={
            s.key: {"steps": s.steps, "values": s.values, "total": s.total} for s in series
        },
        latest_checkpoint=None
        if state.latest_step is None
        else latest_checkpoint(ledger, store, run_id, state.latest_step),
        problems=problems,
        generations=said,
        cosigners=ledger.cosignatures(run_id, state.size),
    )


def latest_checkpoint(
    ledger: Ledger, store: ObjectStore, run_id: str, step: int
) -> LatestCheckpoint:
    """The files of step ``step``'s checkpoint for download links. A record or store problem
    is shown on the page in place of the list (the rest of the page still renders)."""
    try:
        ref = checkpoint_ref(ledger, run_id, step)
        manifest = load_manifest(store, ref)
        files = [CheckpointFile(e.name, e.digest, store.size(e.digest)) for e in manifest.entries]
    except (WebError, LedgerError, StorageError, RecordError) as exc:
        return LatestCheckpoint(step=step, manifest_root=None, files=[], problem=str(exc))
    return LatestCheckpoint(step=step, manifest_root=ref.manifest_root, files=files)


def _data_entry(ledger: Ledger, run_id: str) -> DataManifestEntry:
    record = read_record(ledger.entry(run_id, DATA_MANIFEST_INDEX))
    if not isinstance(record, DataManifestEntry):
        raise RecordError(
            f"run {run_id!r} entry {DATA_MANIFEST_INDEX}",
            "",
            "the data.manifest entry",
            type(record).__name__,
        )
    return record


def _table_rows(
    ledger: Ledger, run_id: str, size: int, page: int, problems: list[str]
) -> list[StepRow]:
    # Page p shows the outer steps among entries [size - p*N, size - (p-1)*N): a window of
    # the log, so a page costs one bounded query however long the run is.
    end = size - (page - 1) * ROWS_PER_PAGE
    start = max(0, end - ROWS_PER_PAGE)
    if end <= start:
        return []
    rows = []
    for entry in ledger.entries(run_id, start, end - start):
        try:
            row = step_row(entry)
        except RecordError as exc:
            problems.append(str(exc))
            continue
        if row is not None:
            rows.append(row)
    return sorted(rows, key=lambda row: row.step, reverse=True)


def step_row(entry: EntryRecord) -> StepRow | None:
    record = read_record(entry)
    if not isinstance(record, OuterStep):
        return None
    return StepRow(
        step=record.step,
        entry_index=entry.index,
        recorded_at=entry.recorded_at.strftime("%Y-%m-%d %H:%M:%S"),
        record=record,
    )


GENERATIONS_LIMIT = 1 << 20
"""Largest generations object the page reads (a few prompts of a few dozen tokens are ~1 KiB)."""


def _generations(store: ObjectStore, row: StepRow, problems: list[str]) -> Generations | None:
    """The step's generations object, verified against its digest as it is read."""
    digest = row.record.generations.object
    try:
        return Generations.from_payload(
            json.loads(store.read_bytes(digest, GENERATIONS_LIMIT)),
            where=f"generations of outer step {row.step}",
        )
    except (StorageError, RecordError, ValueError) as exc:
        problems.append(
            f"outer step {row.step}: its generations object {digest[:16]}… cannot be read: {exc}"
        )
        return None


def data_summary(entry: DataManifestEntry) -> DataSummary:
    """Sources, tokenizer and shard counts of a ``data.manifest`` entry, whether it holds the
    full manifest or only a summary of it (docs/records.md)."""
    manifest = entry.manifest
    if not isinstance(manifest, DataManifest):
        rest = dict(manifest.manifest)
        tokenizer = rest.pop("tokenizer", {})
        rest.update(source_count=manifest.source_count, shard_count=manifest.shard_count)
        return DataSummary(
            manifest_object=entry.manifest_object,
            sources=[],
            source_bytes=0,
            licences={},
            tokenizer=tokenizer if isinstance(tokenizer, dict) else {},
            shard_counts={},
            other=rest,
        )
    held_out = set(manifest.eval_shards)
    counts: dict[str, dict[str, int]] = {}
    for shard in manifest.shards:
        bucket = counts.setdefault(
            "eval" if shard.index in held_out else "train", {"shards": 0, "tokens": 0}
        )
        bucket["shards"] += 1
        bucket["tokens"] += shard.tokens
    licences: dict[str, int] = {}
    for source in manifest.sources:
        licences[source.license] = licences.get(source.license, 0) + 1
    document = manifest.to_payload()
    return DataSummary(
        manifest_object=entry.manifest_object,
        sources=[s.to_payload() for s in manifest.sources],
        source_bytes=sum(s.bytes for s in manifest.sources),
        licences=licences,
        tokenizer=manifest.tokenizer.to_payload(),
        shard_counts=counts,
        other={k: v for k, v in document.items() if k not in ("sources", "shards", "tokenizer")},
    )


def _cluster_fingerprints(genesis: Genesis | None) -> dict[int, str]:
    if genesis is None:
        return {}
    fingerprints = {}
    for keys in genesis.keys.clusters:
        try:
            fingerprints[keys.cluster] = cluster_fingerprint(
                contribution=keys.contribution,
                attestation=keys.attestation,
                platform_root=keys.platform_root,
            )
        except AttestationError:  # a malformed key: verify names it; the page shows none
            continue
    return fingerprints


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}
