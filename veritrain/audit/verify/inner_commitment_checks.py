"""Check 6, continued: every contribution's per-inner-step commitments are there and have the
shape the entry implies (records/commitments.py), so a later ``reproduce --bisect`` has
something to narrow a dispute with.

What is recomputed, not trusted: the object hashes to the digest the cluster signed (its
signature is checked with the contribution); it names this run, step, cluster and stage; it
holds one commitment per inner step of the step, numbered from the first global inner step
of the cluster's data range; its fingerprints have the published method and size; and it
fingerprints the same tensors at the start and at the contribution. Whether the commitments
are *true* only a re-execution can tell (``veritrain reproduce --bisect``).
"""

from __future__ import annotations

import json

from records import OuterStep, RecordError
from records.commitments import FINGERPRINT_DIMS, FINGERPRINT_METHOD, InnerCommitments
from storage.errors import StorageError
from veritrain.audit.verify.expect import Mismatch, expect
from veritrain.audit.verify.report import CheckResult
from veritrain.errors import VeritrainError
from veritrain.sources import RunSource, read_verified
from veritrain.sources.recorded_run import LogEntry


def check_inner_commitments(
    result: CheckResult, run_id: str, entry: LogEntry, step: OuterStep, source: RunSource
) -> None:
    first = {r.cluster: r.first_inner_step for r in step.data_ranges}
    for contributions in step.contributions:
        cluster = contributions.cluster
        for stage in contributions.stages:
            where = f"cluster {cluster} stage {stage.stage} commitments"
            try:
                commitments = InnerCommitments.from_payload(
                    json.loads(read_verified(source, stage.commitments)), where=where
                )
                expect(
                    f"{where}: run, step, cluster and stage",
                    (run_id, step.step, cluster, stage.stage),
                    (commitments.run_id, commitments.step, commitments.cluster, commitments.stage),
                )
                expect(f"{where}: inner steps", step.inner_steps, len(commitments.inner_steps))
                if cluster in first:
                    expect(
                        f"{where}: first inner step", first[cluster], commitments.first_inner_step
                    )
                expect(
                    f"{where}: fingerprint",
                    (FINGERPRINT_METHOD, FINGERPRINT_DIMS),
                    (commitments.method, commitments.dims),
                )
                if not commitments.start.tensors:
                    raise Mismatch(f"{where}: fingerprints no tensors")
            except (Mismatch, RecordError, StorageError, VeritrainError, ValueError) as exc:
                result.fail(str(exc), index=entry.index, step=step.step)
