"""Checks 7–9: checkpoints and data shards against their recorded digests, and the metrics
table against the signed entries.

Re-hashing every object of a large run is expensive, so without ``--deep`` a verifier
re-hashes every object when the run's objects total at most :data:`FULL_CHECK_BYTES`, and
otherwise a sample of steps and shards drawn from the latest signed root: the trainer cannot
predict it when it writes the objects, and every verifier draws the same sample for the same
head. Manifests are always fetched and their roots recomputed; only the bulk files are sampled.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attestation.canonical import canonical_json
from storage.checkpoint import Manifest
from storage.errors import StorageError
from veritrain.verify.report import Report
from veritrain.verify.source import RunSource, read_verified, stream_verified
from veritrain.verify.view import RunView, ViewEntry

FULL_CHECK_BYTES = 1 << 30
"""Without --deep, runs whose objects total at most this many bytes are re-hashed entirely."""
SAMPLED_STEPS = 4
SAMPLED_SHARDS = 16
_TOKEN_BYTES = {"uint8": 1, "uint16": 2, "uint32": 4}


@dataclass(frozen=True)
class DataIndex:
    """The run's data manifest, as the verifier fetched and checked it."""

    document: dict[str, Any]
    shard_digests: dict[int, str]


def sample(seed_root: bytes, population: list[int], k: int, label: str) -> list[int]:
    """``k`` members of ``population`` chosen by a PRNG seeded from the signed root."""
    if k >= len(population):
        return population
    seed = hashlib.sha256(b"veritrain/verify-sample/" + label.encode() + b"/" + seed_root).digest()
    return sorted(random.Random(seed).sample(population, k))


def check_checkpoints(report: Report, view: RunView, source: RunSource, *, deep: bool, seed_root: bytes) -> None:
    """7. Every step's checkpoint manifest hashes to its recorded digest and its root to the
    recorded manifest root; files are re-hashed (all, or a sample: see the module doc)."""
    result = report.check(7)
    manifests: dict[int, tuple[ViewEntry, Manifest]] = {}
    for entry in view.outer_steps:
        checkpoint = entry.payload.get("checkpoint", {})
        try:
            manifest = Manifest.from_json(read_verified(source, checkpoint["manifest_object"]))
            if manifest.root != checkpoint["manifest_root"]:
                raise ValueError(
                    f"manifest root: expected {checkpoint['manifest_root']}, got {manifest.root} (another checkpoint?)"
                )
            if len(manifest.entries) != checkpoint.get("files"):
                raise ValueError(f"manifest lists {len(manifest.entries)} files, the entry says {checkpoint.get('files')}")
        except (KeyError, TypeError, ValueError, StorageError) as exc:
            result.fail(f"checkpoint manifest: {exc}", index=entry.index, step=entry.step)
            continue
        manifests[entry.index] = (entry, manifest)
    indices = sorted(manifests)
    if deep or not indices or _estimated_bytes(source, manifests[indices[-1]][1], len(indices)) <= FULL_CHECK_BYTES:
        chosen = indices
    else:
        chosen = sample(seed_root, indices, SAMPLED_STEPS, "checkpoints")
    for index in chosen:
        entry, manifest = manifests[index]
        for file in manifest.entries:
            result.checked += 1
            try:
                stream_verified(source, file.digest)
            except (ValueError, StorageError) as exc:
                result.fail(f"checkpoint file {file.name}: {exc}", index=entry.index, step=entry.step)
    result.notes.append(f"{len(chosen)} of {len(indices)} checkpoints re-hashed{' (--deep)' if deep else ''}")


def load_data_index(report: Report, view: RunView, source: RunSource) -> DataIndex | None:
    """8a. The data manifest object matches its entry."""
    result = report.check(8)
    entry = view.data_manifest
    if entry is None:
        result.fail("the run has no data.manifest entry")
        return None
    try:
        raw = read_verified(source, entry.payload["manifest_object"])
        document = json.loads(raw)
        if canonical_json(document) != raw:
            raise ValueError("the data manifest object is not canonical JSON")
        if entry.payload.get("inline") and entry.payload.get("manifest") != document:
            raise ValueError("the data manifest in the entry differs from the stored one")
        shards = {int(s["index"]): str(s["sha256"]) for s in document["shards"]}
    except (KeyError, TypeError, ValueError, StorageError) as exc:
        result.fail(f"data manifest: {exc}", index=entry.index)
        return None
    return DataIndex(document=document, shard_digests=shards)


def check_data(report: Report, view: RunView, source: RunSource, data: DataIndex | None, *, deep: bool, seed_root: bytes) -> None:
    """8b. Shards hash to their digests and hold the recorded number of tokens; every step
    read only training shards."""
    result = report.check(8)
    if data is None:
        return
    train = {int(s["index"]) for s in data.document["shards"] if s.get("split") == "train"}
    readers: dict[int, list[ViewEntry]] = {}
    for entry in view.outer_steps:
        for data_range in entry.payload.get("data_ranges", []):
            read = {i for first, last in data_range["shards"] for i in range(int(first), int(last) + 1)}
            for shard_index in read:
                if entry not in readers.setdefault(shard_index, []):
                    readers[shard_index].append(entry)
            if read - train:
                result.fail(
                    f"cluster {data_range['cluster']} read shards {sorted(read - train)[:5]} that are not training shards",
                    index=entry.index,
                    step=entry.step,
                )
    shards = data.document["shards"]
    width = _TOKEN_BYTES.get(str(data.document.get("shard_format", {}).get("dtype")), 0)
    everything = list(range(len(shards)))
    total = sum(int(s["tokens"]) * width for s in shards)
    chosen = everything if deep or total <= FULL_CHECK_BYTES else sample(seed_root, everything, SAMPLED_SHARDS, "shards")
    for position in chosen:
        shard = shards[position]
        result.checked += 1
        try:
            size = stream_verified(source, str(shard["sha256"]))
            if width and size != int(shard["tokens"]) * width:
                raise ValueError(f"expected {int(shard['tokens']) * width} bytes ({shard['tokens']} tokens), got {size}")
        except (ValueError, StorageError) as exc:
            # Name the steps that trained on the shard: those are the ones it puts in doubt.
            read_by = readers.get(int(shard["index"]), [])
            used = f" (read in outer steps {', '.join(str(e.step) for e in read_by)})" if read_by else " (held out)"
            first = read_by[0] if read_by else view.data_manifest
            result.fail(
                f"data shard {shard['index']}{used}: {exc}",
                index=first.index if first else None,
                step=first.step if first else None,
            )
    result.notes.append(f"{len(chosen)} of {len(shards)} shards re-hashed")


def check_metrics(report: Report, view: RunView, source: RunSource) -> None:
    """9. The metrics table (what charts show) equals the metrics signed in the entries."""
    result = report.check(9)
    signed: dict[tuple[int, str], float] = {}
    where: dict[int, ViewEntry] = {}
    for entry in view.outer_steps:
        if entry.step is None:
            continue
        where[entry.step] = entry
        for key, value in entry.payload.get("metrics", {}).items():
            signed[(entry.step, key)] = float(value)
    served = {(m.step, m.key): m.value for m in source.metrics(view.run_id)}
    result.checked = len(signed)
    problems: dict[int, list[str]] = {}
    for (step, key), value in sorted(signed.items()):
        if (step, key) not in served:
            problems.setdefault(step, []).append(f"{key!r} is missing from the metrics table")
        elif served[(step, key)] != value:
            problems.setdefault(step, []).append(
                f"{key!r}: the entry records {value!r}, the metrics table says {served[(step, key)]!r}"
            )
    for step, key in sorted(set(served) - set(signed)):
        problems.setdefault(step, []).append(f"{key!r} is in the metrics table but in no signed entry")
    # One line per step: a step whose entry vanished would otherwise produce one per metric.
    for step, messages in sorted(problems.items()):
        recorded = where.get(step)
        shown = "; ".join(messages[:3]) + (f"; and {len(messages) - 3} more" if len(messages) > 3 else "")
        result.fail(f"metrics of outer step {step}: {shown}", index=recorded.index if recorded else None, step=step)


def _estimated_bytes(source: RunSource, last: Manifest, steps: int) -> int:
    """Bytes of all checkpoints, estimated as steps x the size of the last one (a few size
    look-ups rather than one per file of the run)."""
    try:
        return steps * sum(source.object_size(f.digest) for f in last.entries)
    except StorageError:
        return 0  # a missing file is reported by the re-hash; check everything


def shard_digests(data: DataIndex | None) -> Mapping[int, str] | None:
    return data.shard_digests if data else None
