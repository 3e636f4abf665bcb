"""Checks 7 and 9: checkpoints against their recorded digests, and the metrics table against
the signed entries.

Re-hashing every checkpoint of a large run is expensive. Without ``--deep`` the verifier
re-hashes the newest checkpoint in full, estimates the run's checkpoint bytes from the bytes
it just verified (never from sizes the source reports), and re-hashes everything when that is
at most :data:`FULL_CHECK_BYTES`, else a sample of :data:`SAMPLED_STEPS` more steps drawn from
local randomness mixed with the signed root (veritrain/audit/verify/sampling.py). Manifests are
always fetched and their roots recomputed; only the bulk files are sampled.
"""

from __future__ import annotations

import json
import math

from records import Genesis, RecordError
from records.generations import Generations
from storage.checkpoint_files import Manifest
from storage.errors import StorageError
from trainer.config import TrainConfig
from veritrain.audit.verify.report import Report
from veritrain.audit.verify.sampling import sample
from veritrain.errors import VeritrainError
from veritrain.model_signature import check_signature
from veritrain.sources import RunSource, SourceError, read_verified, stream_verified
from veritrain.sources.downloads import read_checkpoint_manifest
from veritrain.sources.recorded_run import LogEntry, RecordedRun

FULL_CHECK_BYTES = 1 << 30
"""Without --deep, runs whose checkpoints total at most this many bytes are re-hashed entirely."""
SAMPLED_STEPS = 4


def check_checkpoints(
    report: Report,
    run: RecordedRun,
    genesis: Genesis | None,
    source: RunSource,
    *,
    deep: bool,
    signed_root: bytes,
) -> dict[int, tuple[LogEntry, Manifest]]:
    """7. Every step's checkpoint manifest hashes to its recorded digest and its root to the
    recorded manifest root, and lists as many files as the entry says; its ``model.sig``
    verifies under the genesis' model-signing key over exactly those files; files are
    re-hashed (all, or a sample: see the module doc). Returns the manifests that read, by
    entry index (veritrain/audit/verify/revision_checks.py checks what their files say)."""
    result = report.check(7)
    manifests: dict[int, tuple[LogEntry, Manifest]] = {}
    for entry, step in run.outer_steps:
        try:
            manifest = read_checkpoint_manifest(source, step.checkpoint)
            if len(manifest.entries) != step.checkpoint.files:
                raise ValueError(
                    f"manifest lists {len(manifest.entries)} "
                    f"files, the entry says {step.checkpoint.files}"
                )
            if genesis is not None:
                check_signature(
                    read_verified(source, step.checkpoint.signature_object),
                    manifest,
                    genesis.keys.model_signing,
                )
        except (ValueError, StorageError, VeritrainError) as exc:
            result.fail(f"checkpoint manifest: {exc}", index=entry.index, step=step.step)
            continue
        manifests[entry.index] = (entry, manifest)
    indices = sorted(manifests)
    if not indices:
        return manifests
    newest = indices[-1]
    verified_bytes = _rehash(report, *manifests[newest], source)
    rest = indices[:-1]
    if deep or verified_bytes * len(indices) <= FULL_CHECK_BYTES:
        chosen = rest
    else:
        chosen = sample(signed_root, rest, SAMPLED_STEPS, "checkpoints")
    for index in chosen:
        _rehash(report, *manifests[index], source)
    how = (
        " (--deep)"
        if deep
        else ""
        if len(chosen) == len(rest)
        else " (the newest, and a random sample)"
    )
    result.notes.append(f"{len(chosen) + 1} of {len(indices)} checkpoints re-hashed{how}")
    return manifests


def _rehash(report: Report, entry: LogEntry, manifest: Manifest, source: RunSource) -> int:
    result = report.check(7)
    total = 0
    for file in manifest.entries:
        result.checked += 1
        try:
            total += stream_verified(source, file.digest)
        except (ValueError, StorageError, VeritrainError) as exc:
            result.fail(f"checkpoint file {file.name}: {exc}", index=entry.index, step=entry.step)
    return total


def check_generations(
    report: Report, run: RecordedRun, source: RunSource, config: TrainConfig | None
) -> None:
    """7b. Every step's generations object hashes to its digest, reads as a generations record,
    and answers the configuration's prompts with its number of new tokens at most."""
    result = report.check(7)
    for entry, step in run.outer_steps:
        result.checked += 1
        try:
            said = Generations.from_payload(
                json.loads(read_verified(source, step.generations.object)),
                where=f"generations of outer step {step.step}",
            )
            if config is not None:
                wanted = (config.generation.prompts, config.generation.max_new_tokens)
                if (said.prompts, said.max_new_tokens) != wanted:
                    raise ValueError(
                        f"generations: expected prompts {list(wanted[0])} "
                        f"with {wanted[1]} new tokens (the configuration's), "
                        f"got {list(said.prompts)} with {said.max_new_tokens}"
                    )
        except (ValueError, StorageError, VeritrainError, RecordError) as exc:
            result.fail(f"generations: {exc}", index=entry.index, step=step.step)


def check_metrics(report: Report, run: RecordedRun, source: RunSource) -> None:
    """9. The metrics table (what charts show) equals the metrics signed in the entries, and
    no entry lists a metric both as finite and as non-finite."""
    result = report.check(9)
    signed: dict[tuple[int, str], float] = {}
    where: dict[int, LogEntry] = {}
    problems: dict[int, list[str]] = {}
    for entry, outer_step in run.outer_steps:
        where[outer_step.step] = entry
        for key, value in outer_step.metrics.items():
            signed[(outer_step.step, key)] = value
        # A metric is finite (in ``metrics``) or not (named in ``nonfinite_metrics``), never
        # both: a name in both would let reproduce skip a finite value it must compare.
        for key in sorted(set(outer_step.metrics) & set(outer_step.nonfinite_metrics)):
            problems.setdefault(outer_step.step, []).append(
                f"{key!r} is recorded both as {outer_step.metrics[key]!r} and as non-finite"
            )
    try:
        rows = source.metrics(run.run_id)
    except SourceError as exc:
        result.fail(f"the metrics table cannot be read: {exc}")
        return
    served = {(m.step, m.key): m.value for m in rows}
    result.checked = len(signed)
    for (step, key), value in sorted(signed.items()):
        if (step, key) not in served:
            problems.setdefault(step, []).append(f"{key!r} is missing from the metrics table")
            continue
        shown = served[(step, key)]
        if (
            isinstance(shown, bool)
            or not isinstance(shown, int | float)
            or not math.isfinite(shown)
        ):
            problems.setdefault(step, []).append(
                f"{key!r}: the metrics table serves {shown!r}, not a finite number"
            )
        elif float(shown) != value:
            problems.setdefault(step, []).append(
                f"{key!r}: the entry records {value!r}, the metrics table says {shown!r}"
            )
    for step, key in sorted(set(served) - set(signed)):
        problems.setdefault(step, []).append(
            f"{key!r} is in the metrics table but in no signed entry"
        )
    # One line per step: a step whose entry vanished would otherwise produce one per metric.
    for step, messages in sorted(problems.items()):
        recorded = where.get(step)
        shown_messages = "; ".join(messages[:3]) + (
            f"; and {len(messages) - 3} more" if len(messages) > 3 else ""
        )
        result.fail(
            f"metrics of outer step {step}: {shown_messages}",
            index=recorded.index if recorded else None,
            step=step,
        )
