"""The evidence recorded for each outer step (DESIGN.md §5).

For step t the coordinator, after the checkpoint's files and manifest are stored:

1. builds an in-toto Statement v1 with an SLSA provenance v1 predicate whose subject is the
   checkpoint (its manifest root) and whose dependencies are the previous checkpoint, the data
   shards consumed and the code digest; byproducts: the metrics digest;
2. signs it as a DSSE envelope with the run's statement key and stores the envelope;
3. extends every cluster attester's outer-step register with the statement digest and takes a
   quote binding ``report_data = SHA-512(nonce || prev leaf hash || statement digest)``, where
   the nonce is the log's root hash just before this entry: fixed only once the previous step
   was committed, and recomputable by any verifier from the entries alone;
4. signs each cluster's contribution digest with that cluster's key.

All of it is stored as content-addressed objects; the ``outer_step`` entry names their digests.

Honest limits: with the software attester every cluster's quote is produced in the
coordinator's process with keys from the key folder. On a multi-host deployment with
hardware TEEs each cluster would produce its quote on its own host (one more round trip).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from attestation.attester import SOFTWARE_TEE_TYPE
from attestation.contribution import Contribution, sign_contribution
from attestation.dsse import sign_envelope
from attestation.endorsement import endorse
from attestation.measurement import OUTER_STEP_EVENT, OUTER_STEP_REGISTER, Event, EventLog
from attestation.quote import report_data
from attestation.software import DEFAULT_VALIDITY, SOFTWARE_SVN, SoftwareAttester
from attestation.statement import (
    IN_TOTO_PAYLOAD_TYPE,
    CodeDigest,
    DataShard,
    OuterStepProvenance,
    encode_statement,
)
from records.outer_step import (
    ClusterContributions,
    Compression,
    QuoteRef,
    StageContribution,
    StepAttestation,
)
from storage import ObjectStore
from trainer.recorder import ContributionDigest
from veritrain.keyring import KeyRing


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
            Event(register=OUTER_STEP_REGISTER, event_type=OUTER_STEP_EVENT, digest=bytes.fromhex(d))
            for d in statement_digests
        )
    )


class StepAttestor:
    """Produces and stores the evidence of each outer step of one run."""

    def __init__(
        self,
        *,
        run_id: str,
        keys: KeyRing,
        store: ObjectStore,
        clusters: int,
        launch_measurement: bytes,
        code: CodeDigest,
        previous_statements: Sequence[str],
        now: datetime,
    ) -> None:
        """``previous_statements``: statement digests of the steps already recorded (resume),
        so each attester's registers continue from where the run left them."""
        self._run_id = run_id
        self._keys = keys
        self._store = store
        self._code = code
        platform_root = keys.platform_root()
        self._attesters = []
        for cluster in range(clusters):
            key = keys.attester_key(run_id, cluster)
            endorsement = endorse(
                platform_root=platform_root,
                attestation_key=key.public,
                tee_type=SOFTWARE_TEE_TYPE,
                svn=SOFTWARE_SVN,
                not_before=now,
                not_after=now + DEFAULT_VALIDITY,
            )
            self._attesters.append(
                SoftwareAttester(
                    attestation_key=key,
                    endorsement=endorsement,
                    launch_measurement=launch_measurement,
                    event_log=outer_step_events(previous_statements),
                )
            )

    def attest(
        self,
        *,
        step: int,
        manifest_root: str,
        previous_manifest_root: str | None,
        hyperparameters: Mapping[str, Any],
        data_shards: Sequence[DataShard],
        metrics_digest: str,
        nonce: bytes,
        prev_leaf_hash: bytes,
        contributions: Sequence[ContributionDigest],
    ) -> tuple[StepAttestation, tuple[ClusterContributions, ...]]:
        """Store the step's statement, quotes and contribution signatures; return the
        ``attestation`` and ``contributions`` parts of the ``outer_step`` record."""
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
        statement_digest = hashlib.sha256(payload).digest()
        envelope = sign_envelope(payload, IN_TOTO_PAYLOAD_TYPE, [self._keys.statement_key(self._run_id)])
        statement_object = self._store.put_bytes(envelope.to_json())

        binding = report_data(nonce, prev_leaf_hash, statement_digest)
        quotes = []
        for cluster, attester in enumerate(self._attesters):
            attester.extend(register=OUTER_STEP_REGISTER, digest=statement_digest, event_type=OUTER_STEP_EVENT)
            quote = attester.quote(report_data=binding, nonce=nonce)
            quotes.append(QuoteRef(cluster=cluster, object=self._store.put_bytes(quote)))

        attestation = StepAttestation(
            statement_object=statement_object,
            statement_digest=statement_digest.hex(),
            nonce=nonce.hex(),
            quotes=tuple(quotes),
        )
        return attestation, self._sign_contributions(step, contributions)

    def _sign_contributions(
        self, step: int, contributions: Sequence[ContributionDigest]
    ) -> tuple[ClusterContributions, ...]:
        by_cluster: dict[int, list[StageContribution]] = {}
        for item in sorted(contributions, key=lambda c: (c.cluster, c.stage)):
            signed = sign_contribution(
                Contribution(
                    run_id=self._run_id,
                    step=step,
                    cluster=item.cluster,
                    stage=item.stage,
                    payload_digest=item.digest,
                ),
                self._keys.cluster_key(self._run_id, item.cluster),
            )
            by_cluster.setdefault(item.cluster, []).append(
                StageContribution(
                    stage=item.stage, digest=item.digest, signature_object=self._store.put_bytes(signed.to_json())
                )
            )
        return tuple(
            ClusterContributions(cluster=cluster, stages=tuple(stages)) for cluster, stages in sorted(by_cluster.items())
        )
