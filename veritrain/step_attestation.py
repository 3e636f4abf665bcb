"""The coordinator's part of each outer step's evidence (DESIGN.md §5): the provenance
statement, and the request every cluster answers with its own signatures and quote.

For step t the coordinator, after the checkpoint's files and manifest are stored:

1. builds an in-toto Statement v1 with an SLSA provenance v1 predicate whose subject is the
   checkpoint (its manifest root) and whose dependencies are the previous checkpoint, the data
   shards consumed and the code digest; byproducts: the metrics digest;
2. signs it as a DSSE envelope with the run's statement key and stores the envelope;
3. asks every cluster to attest (veritrain/cluster_identity.py): each cluster extends its
   attester's register with the statement digest and quotes ``report_data = SHA-512(nonce ||
   prev leaf hash || statement digest)``, where the nonce is the log's root hash just before
   this entry -- fixed only once the previous step was committed, and recomputable by any
   verifier from the entries alone; each process signs its own contribution digest.

The verifier rebuilds the same statement parameters and event log from the genesis and the
entries (:func:`statement_parameters`, :func:`outer_step_events`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from attestation.dsse import sign_envelope
from attestation.keys import SigningKey
from attestation.measurement import OUTER_STEP_EVENT, OUTER_STEP_REGISTER, Event, EventLog
from attestation.statement import (
    IN_TOTO_PAYLOAD_TYPE,
    CodeDigest,
    DataShard,
    OuterStepProvenance,
    encode_statement,
)
from records.outer_step import Compression
from storage import ObjectStore


def shard_dependency(index: int, sha256: str) -> DataShard:
    """How a statement names data shard ``index`` among its resolved dependencies."""
    return DataShard(name=f"shard-{index:06d}", sha256=sha256)


def statement_parameters(
    *, method: str, inner_steps: int, compression: Compression, config_digest: str
) -> dict[str, Any]:
    """The statement's external parameters (SLSA ``externalParameters``) of one outer step:
    written by the recorder, recomputed from the genesis and the entry by the verifier."""
    return {
        "method": method,
        "inner_steps": inner_steps,
        "compression": compression.to_payload(),
        "config_digest": config_digest,
    }


def outer_step_events(statement_digests: Iterable[str]) -> EventLog:
    """The event log an attester has after the given steps: one outer-step event each."""
    return EventLog(
        tuple(
            Event(
                register=OUTER_STEP_REGISTER, event_type=OUTER_STEP_EVENT, digest=bytes.fromhex(d)
            )
            for d in statement_digests
        )
    )


class StatementSigner:
    """Signs and stores each outer step's provenance statement for one run."""

    def __init__(
        self, *, run_id: str, key: SigningKey, store: ObjectStore, code: CodeDigest
    ) -> None:
        self._run_id = run_id
        self._key = key
        self._store = store
        self._code = code

    def sign(
        self,
        *,
        step: int,
        manifest_root: str,
        previous_manifest_root: str | None,
        hyperparameters: Mapping[str, Any],
        data_shards: Sequence[DataShard],
        metrics_digest: str,
    ) -> tuple[str, str]:
        """Store the step's signed statement; return (its object digest, the hex SHA-256 of
        the statement itself)."""
        provenance = OuterStepProvenance(
            run_id=self._run_id,
            step=step,
            manifest_root=manifest_root,
            hyperparameters=hyperparameters,
            previous_manifest_root=previous_manifest_root,
            data_shards=tuple(data_shards),
            code=self._code,
            metrics_digest=metrics_digest,
        )
        payload = encode_statement(provenance)
        envelope = sign_envelope(payload, IN_TOTO_PAYLOAD_TYPE, [self._key])
        return self._store.put_bytes(envelope.to_json()), hashlib.sha256(payload).hexdigest()
