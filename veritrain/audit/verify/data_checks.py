"""Check 8: the run's data. The data manifest object matches its entry; every shard hashes to its
digest and holds the recorded number of tokens, and its chunk index (what a re-executor verifies
ranged downloads against) is the one its bytes give; the assignment rule the manifest records is the
one the configuration implies; and every step's data ranges -- which windows each cluster read, and
so which shards -- are recomputed from that rule and compared.

Shards are all re-hashed when they total at most :data:`FULL_CHECK_BYTES` (a size computed
from the signed token counts, never from what the source reports), otherwise a sample drawn
from local randomness and the signed root.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from records import DataManifest, DataManifestEntry
from storage.errors import StorageError
from trainer.api import assignment_rule
from trainer.config import TrainConfig
from trainer.errors import TrainerError
from veritrain.audit.verify.report import Report
from veritrain.audit.verify.sampling import sample
from veritrain.errors import VeritrainError
from veritrain.sources import RunSource, read_verified, stream_verified
from veritrain.sources.downloads import read_data_manifest
from veritrain.sources.recorded_run import LogEntry, RecordedRun

FULL_CHECK_BYTES = 1 << 30
SAMPLED_SHARDS = 16


@dataclass(frozen=True)
class DataIndex:
    """The run's data manifest, as the verifier fetched and checked it."""

    manifest: DataManifest
    entry: LogEntry


def load_data(report: Report, run: RecordedRun, source: RunSource) -> DataIndex | None:
    """8a. The data manifest object matches its entry."""
    result = report.check(8)
    entry = run.data_manifest_entry
    if entry is None:
        result.fail("the run has no data.manifest entry")
        return None
    if not isinstance(entry.record, DataManifestEntry):
        return None  # reported by check 2
    try:
        manifest = read_data_manifest(source, entry.record)
    except (ValueError, StorageError, VeritrainError) as exc:
        result.fail(f"data manifest: {exc}", index=entry.index)
        return None
    return DataIndex(manifest=manifest, entry=entry)


def check_data(
    report: Report,
    run: RecordedRun,
    source: RunSource,
    data: DataIndex | None,
    config: TrainConfig | None,
    *,
    deep: bool,
    signed_root: bytes,
) -> None:
    """8b-8d. Shards, assignment rule and data ranges."""
    if data is None:
        return
    _check_ranges(report, run, data, config)
    _check_shards(report, run, source, data, deep=deep, signed_root=signed_root)


def _check_ranges(
    report: Report, run: RecordedRun, data: DataIndex, config: TrainConfig | None
) -> None:
    """8c. The recorded rule is the configuration's; every step's ranges recompute from it."""
    result = report.check(8)
    if config is None:
        result.fail("data ranges not recomputed: the configuration cannot be read (check 10)")
        return
    try:
        rule = assignment_rule(config, data.manifest)
    except TrainerError as exc:
        result.fail(
            f"the configuration's assignment rule cannot be built on this corpus: {exc}",
            index=data.entry.index,
        )
        return
    if data.manifest.assignment is None or dict(data.manifest.assignment) != rule.to_dict():
        result.fail(
            f"assignment rule: expected {rule.to_dict()} (from the configuration and the corpus), "
            f"got {data.manifest.assignment}",
            index=data.entry.index,
        )
        return
    genesis = run.genesis
    if data.manifest.tokenizer != genesis.tokenizer:
        result.fail(
            f"tokenizer: the genesis names {genesis.tokenizer.to_payload()}, "
            f"the data manifest {data.manifest.tokenizer.to_payload()}",
            index=data.entry.index,
        )
    first_inner_step, total = 0, 0
    for entry, step in run.outer_steps:
        result.checked += 1
        expected = tuple(
            rule.data_range(c, first_inner_step, step.inner_steps) for c in step.quorum.clusters
        )
        if step.data_ranges != expected:
            claimed = {r.cluster: r for r in step.data_ranges}
            wrong = [r.cluster for r in expected if claimed.get(r.cluster) != r] or sorted(claimed)
            result.fail(
                f"data ranges of cluster(s) {wrong} are not "
                "what the assignment rule gives for inner steps "
                f"{first_inner_step}..{first_inner_step + step.inner_steps - 1}",
                index=entry.index,
                step=step.step,
            )
        step_tokens = sum(r.tokens for r in expected)
        total += step_tokens
        if (step.tokens.step, step.tokens.total) != (step_tokens, total):
            result.fail(
                f"tokens: expected {step_tokens} this step and {total} "
                f"in all, got {step.tokens.step} and {step.tokens.total}",
                index=entry.index,
                step=step.step,
            )
        planned = config.inner_steps_of(step.step)  # a step past T: H (another check says so)
        if not config.outer.adaptive_inner_steps and step.inner_steps != planned:
            result.fail(
                f"inner steps: expected H = {planned} (the genesis's plan for step "
                f"{step.step}, not adaptive), got {step.inner_steps}",
                index=entry.index,
                step=step.step,
            )
        first_inner_step += step.inner_steps


def _check_shards(
    report: Report,
    run: RecordedRun,
    source: RunSource,
    data: DataIndex,
    *,
    deep: bool,
    signed_root: bytes,
) -> None:
    """8b, 8d. Steps read training shards only; shards hash to their digests with their sizes."""
    result = report.check(8)
    manifest = data.manifest
    train = set(manifest.train_shards)
    readers: dict[int, list[LogEntry]] = {}
    for entry, step in run.outer_steps:
        for data_range in step.data_ranges:
            read = set(data_range.shard_indices())
            for shard_index in read:
                readers.setdefault(shard_index, []).append(entry)
            if read - train:
                result.fail(
                    f"cluster {data_range.cluster} read shards "
                    f"{sorted(read - train)[:5]} that are not training shards",
                    index=entry.index,
                    step=step.step,
                )
    shards = manifest.shards
    total = sum(s.tokens for s in shards) * manifest.token_bytes
    everything = list(range(len(shards)))
    chosen = (
        everything
        if deep or total <= FULL_CHECK_BYTES
        else sample(signed_root, everything, SAMPLED_SHARDS, "shards")
    )
    for position in chosen:
        shard = shards[position]
        result.checked += 1
        try:
            chunks = _ChunkHasher(manifest.chunk_bytes) if manifest.chunk_bytes else None
            size = stream_verified(source, shard.sha256, chunks.update if chunks else None)
            expected = shard.tokens * manifest.token_bytes
            if size != expected:
                raise ValueError(f"expected {expected} bytes ({shard.tokens} tokens), got {size}")
            if (
                chunks is not None
                and shard.chunks is not None
                and read_verified(source, shard.chunks) != chunks.index()
            ):
                raise ValueError(
                    f"its chunk index {shard.chunks[:16]}… is not the "
                    f"SHA-256 of its {manifest.chunk_bytes}-byte chunks"
                )
        except (ValueError, StorageError, VeritrainError) as exc:
            # Name the steps that trained on the shard: those are the ones it puts in doubt.
            read_by = sorted(
                {e.index: e for e in readers.get(shard.index, [])}.values(), key=lambda e: e.index
            )
            used = (
                f" (read in outer steps {', '.join(str(e.step) for e in read_by)})"
                if read_by
                else " (held out)"
            )
            first = read_by[0] if read_by else data.entry
            result.fail(
                f"data shard {shard.index}{used}: {exc}", index=first.index, step=first.step
            )
    result.notes.append(
        f"{len(chosen)} of {len(shards)} shards re-hashed; "
        "data ranges recomputed from the assignment rule"
    )


class _ChunkHasher:
    """The chunk index (records/data_manifest.py) of a stream, computed as it passes."""

    def __init__(self, chunk_bytes: int) -> None:
        self.chunk_bytes = chunk_bytes
        self._pending = bytearray()
        self._digests: list[bytes] = []

    def update(self, data: bytes) -> None:
        self._pending.extend(data)
        while len(self._pending) >= self.chunk_bytes:
            self._digests.append(hashlib.sha256(self._pending[: self.chunk_bytes]).digest())
            del self._pending[: self.chunk_bytes]

    def index(self) -> bytes:
        tail = [hashlib.sha256(self._pending).digest()] if self._pending else []
        return b"".join(self._digests + tail)
