"""The run channel's messages (channel.py) as JSON: what crosses clusters, and back.

Every message is a typed object on both sides; JSON carries it (never a pickle: a cluster does
not run what another sends). Records' own types travel in their payload form
(``to_payload``/``read``), the trainer's in the small forms below.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from records.commitments import InnerCommitments
from records.fields import Fields
from records.genesis import ClusterKeys
from records.outer_step import CheckpointRef, ClusterVerdict, QuoteRef, StageContribution
from trainer.outer.protocol import Anomaly, OuterUpdate
from trainer.recorder import AttestationRequest, ClusterEvidence
from trainer.runtime.report import RankReport


def keys_message(keys: ClusterKeys | None) -> Any:
    return keys.to_payload() if keys is not None else None


def keys_from(message: Any, *, cluster: int) -> ClusterKeys | None:
    if message is None:
        return None
    return ClusterKeys.read(Fields(message, where=f"cluster {cluster}'s enrolment"))


def request_message(request: AttestationRequest | None) -> Any:
    if request is None:
        return {"request": None}
    return {
        "request": {
            "step": request.step,
            "nonce": request.nonce,
            "prev_leaf": request.prev_leaf,
            "statement_digest": request.statement_digest,
            "statements": list(request.statements),
        }
    }


def request_from(message: Mapping[str, Any]) -> AttestationRequest | None:
    body = message["request"]
    if body is None:
        return None
    return AttestationRequest(
        step=int(body["step"]),
        nonce=str(body["nonce"]),
        prev_leaf=str(body["prev_leaf"]),
        statement_digest=str(body["statement_digest"]),
        statements=tuple(str(s) for s in body["statements"]),
    )


def evidence_message(evidence: ClusterEvidence) -> dict[str, Any]:
    return {
        "cluster": evidence.cluster,
        "stage": evidence.stage,
        "contribution": evidence.contribution.to_payload() if evidence.contribution else None,
        "quote": evidence.quote.to_payload() if evidence.quote else None,
    }


def evidence_from(message: Mapping[str, Any]) -> ClusterEvidence:
    where = f"cluster {message['cluster']}'s evidence"
    contribution, quote = message["contribution"], message["quote"]
    return ClusterEvidence(
        cluster=int(message["cluster"]),
        stage=int(message["stage"]),
        contribution=StageContribution.read(Fields(contribution, where=where))
        if contribution
        else None,
        quote=QuoteRef.read(Fields(quote, where=where)) if quote else None,
    )


def report_message(report: RankReport) -> dict[str, Any]:
    return {
        "cluster": report.cluster,
        "stage": report.stage,
        "files": dict(report.files),
        "updates": [_update_message(u) for u in report.updates],
        "eval_loss": report.eval_loss,
        "compute_seconds": report.compute_seconds,
        "comm_seconds": report.comm_seconds,
        "exposed_comm_seconds": report.exposed_comm_seconds,
        "quorum_seconds": report.quorum_seconds,
        "bytes_sent": report.bytes_sent,
        "commitments": report.commitments.to_payload() if report.commitments is not None else None,
    }


def report_from(message: Mapping[str, Any]) -> RankReport:
    eval_loss, commitments = message["eval_loss"], message["commitments"]
    return RankReport(
        cluster=int(message["cluster"]),
        stage=int(message["stage"]),
        files={str(k): str(v) for k, v in message["files"].items()},
        updates=[_update_from(u) for u in message["updates"]],
        eval_loss=None if eval_loss is None else float(eval_loss),
        compute_seconds=float(message["compute_seconds"]),
        comm_seconds=float(message["comm_seconds"]),
        exposed_comm_seconds=float(message["exposed_comm_seconds"]),
        quorum_seconds=float(message["quorum_seconds"]),
        bytes_sent=int(message["bytes_sent"]),
        commitments=None if commitments is None else InnerCommitments.from_payload(commitments),
    )


def checkpoint_message(checkpoint: CheckpointRef | None) -> Any:
    return checkpoint.to_payload() if checkpoint is not None else None


def checkpoint_from(message: Any, *, step: int) -> CheckpointRef | None:
    if message is None:
        return None
    return CheckpointRef.read(Fields(message, where=f"the recorded checkpoint of step {step}"))


def _update_message(update: OuterUpdate) -> dict[str, Any]:
    return {
        "round": update.round,
        "clusters": list(update.clusters),
        "contribution_digests": list(update.contribution_digests),
        "anomalies": [
            {"cluster": a.cluster, "reason": a.reason, "excluded": a.excluded}
            for a in update.anomalies
        ],
        "payload_bytes": update.payload_bytes,
        "rank": update.rank,
        "bits": update.bits,
        "stats": dict(update.stats),
        "verdicts": [v.to_payload() for v in update.verdicts],
    }


def _update_from(message: Mapping[str, Any]) -> OuterUpdate:
    return OuterUpdate(
        round=int(message["round"]),
        clusters=[int(c) for c in message["clusters"]],
        contribution_digests=[str(d) for d in message["contribution_digests"]],
        anomalies=[
            Anomaly(
                cluster=int(a["cluster"]), reason=str(a["reason"]), excluded=bool(a["excluded"])
            )
            for a in message["anomalies"]
        ],
        payload_bytes=int(message["payload_bytes"]),
        rank=int(message["rank"]),
        bits=int(message["bits"]),
        stats={str(k): float(v) for k, v in message["stats"].items()},
        verdicts=[
            ClusterVerdict.read(Fields(v, where=f"round {message['round']}'s verdicts"))
            for v in message["verdicts"]
        ],
    )
