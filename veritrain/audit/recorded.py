"""The per-inner-step commitments a step recorded, each checked to be signed by its cluster.

A commitments object is named by the ``outer_step`` entry (which the log check verified) and
its digest is inside the cluster's signed contribution statement: a disagreement found in it
is the cluster's own claim, not something the coordinator could have written for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from attestation.contribution import Contribution, verify_contribution
from attestation.dsse import Envelope
from attestation.errors import AttestationError
from attestation.keys import PublicKey
from records import Genesis, OuterStep, RecordError
from records.commitments import InnerCommitments
from storage.errors import StorageError
from veritrain.errors import VeritrainError
from veritrain.sources import RunSource, read_verified

Key = tuple[int, int]
"""(cluster, stage)."""


def recorded_commitments(
    source: RunSource, genesis: Genesis, step: OuterStep, clusters: Iterable[int]
) -> tuple[dict[Key, InnerCommitments], list[str]]:
    """The commitments of ``clusters``' stages in ``step``, and what is wrong with any that
    could not be read or are not signed by their cluster."""
    wanted = set(clusters)
    found: dict[Key, InnerCommitments] = {}
    problems: list[str] = []
    for contributions in step.contributions:
        cluster = contributions.cluster
        if cluster not in wanted:
            continue
        for stage in contributions.stages:
            where = f"cluster {cluster} stage {stage.stage} commitments"
            try:
                envelope = Envelope.from_json(read_verified(source, stage.signature_object))
                verify_contribution(
                    envelope,
                    key=PublicKey.from_vkey(genesis.keys.cluster(cluster).contribution),
                    expected=Contribution(
                        run_id=genesis.run_id,
                        step=step.step,
                        cluster=cluster,
                        stage=stage.stage,
                        payload_digest=stage.digest,
                        commitments_digest=stage.commitments,
                    ),
                )
                commitments = InnerCommitments.from_payload(
                    json.loads(read_verified(source, stage.commitments)),
                    where=f"{where} {stage.commitments[:16]}…",
                )
            except (
                AttestationError,
                RecordError,
                StorageError,
                VeritrainError,
                ValueError,
                IndexError,
            ) as exc:
                problems.append(f"{where}: {exc}")
                continue
            identity = (
                commitments.run_id,
                commitments.step,
                commitments.cluster,
                commitments.stage,
            )
            if identity != (genesis.run_id, step.step, cluster, stage.stage):
                problems.append(f"{where}: made for run, step, cluster and stage {identity}")
                continue
            found[(cluster, stage.stage)] = commitments
    missing = sorted(
        (c, s) for c in wanted for s in range(genesis.topology.stages) if (c, s) not in found
    )
    if missing and not problems and genesis.method != "allreduce":
        problems.append(f"no commitments recorded for (cluster, stage) {missing}")
    return found, problems
