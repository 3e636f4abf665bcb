"""A cluster's own identity: its key folder, its enrolment, and what it signs each step.

Each cluster keeps its keys in its own folder on its own host (``veritrain train --key-dir``,
or ``VERITRAIN_KEY_DIR`` of that cluster's processes), created there, never copied::

    <cluster key dir>/runs/<run_id>/contribution.key   signs the cluster's own contribution digests
    <cluster key dir>/runs/<run_id>/attestation.key    signs the cluster's quotes
    <cluster key dir>/runs/<run_id>/platform.key       the software TEE's platform root: endorses
                                                       the attestation key (a hardware TEE's
                                                       vendor chain takes its place)

At genesis the cluster enrols the contribution and attestation keys with proofs of possession made
in its own process (attestation/enrolment.py), over the hardware class that process measured
(veritrain/hardware.py): the genesis' verification policy names one class, and ``veritrain
verify`` holds it to what every cluster signed here. At every outer step each of the cluster's
processes signs its own contribution digest -- the one it computed, not one it is told -- before
the payload goes on the wire, and the process that speaks for the cluster (pipeline stage 0)
extends its attester's register with the step's statement and quotes the coordinator's nonce. The
signed objects are stored by the cluster itself; the coordinator only collects their digests and
cannot make them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from attestation.attester import Attester, AttesterSetup
from attestation.canonical import canonical_digest, canonical_json
from attestation.contribution import Contribution, sign_contribution
from attestation.enrolment import Enrolment, prove_possession
from attestation.keys import SigningKey, load_or_create
from attestation.measurement import OUTER_STEP_EVENT, OUTER_STEP_REGISTER
from attestation.quote import report_data
from attestation.registry import tee_backend
from ledger.envelope import check_run_id
from records.commitments import InnerCommitments
from records.genesis import ClusterKeys, HardwareClass
from records.outer_step import QuoteRef, StageContribution
from storage import ObjectStore
from veritrain.errors import RecorderError

if TYPE_CHECKING:
    # trainer.recorder imports torch (~3 s of CPU): `veritrain cluster-keys` reads a key folder
    # and needs none of it.
    from trainer.recorder import AttestationRequest, ClusterEvidence, ContributionDigest

SPEAKER_STAGE = 0
"""The pipeline stage whose process quotes for its cluster and enrols its keys."""


@dataclass(frozen=True)
class ClusterKeyFolder:
    """One cluster's key folder."""

    root: Path
    origin: str

    def _key(self, run_id: str, cluster: int, role: str) -> SigningKey:
        check_run_id(run_id)  # the run id becomes a folder name: no '/', no '..'
        return load_or_create(
            self.root / "runs" / run_id / f"{role}.key",
            f"{self.origin}/runs/{run_id}/cluster-{cluster}/{role}",
        )

    def contribution_key(self, run_id: str, cluster: int) -> SigningKey:
        return self._key(run_id, cluster, "contribution")

    def attestation_key(self, run_id: str, cluster: int) -> SigningKey:
        return self._key(run_id, cluster, "attestation")

    def platform_root(self, run_id: str, cluster: int) -> SigningKey:
        return self._key(run_id, cluster, "platform")

    def held_keys(self, run_id: str) -> dict[str, str]:
        """The verifier keys this folder holds for ``run_id`` (contribution, attestation,
        platform_root), read, never created: what the cluster's operator compares with the
        genesis (``veritrain cluster-keys``). Raise FileNotFoundError if one is missing."""
        check_run_id(run_id)
        folder = self.root / "runs" / run_id
        return {
            role: SigningKey.load(folder / f"{stem}.key").public.vkey
            for role, stem in (
                ("contribution", "contribution"),
                ("attestation", "attestation"),
                ("platform_root", "platform"),
            )
        }

    def enrol(
        self, run_id: str, config_digest: str, cluster: int, *, hardware: HardwareClass | None
    ) -> ClusterKeys:
        """The cluster's public keys with proofs of possession for this run, configuration and
        ``hardware`` (the class this process measured; None makes a v1 enrolment, as runs
        recorded before v2 have). Deterministic: Ed25519 signatures are, so a resumed cluster on
        the same class enrols identically."""
        contribution = self.contribution_key(run_id, cluster)
        attestation = self.attestation_key(run_id, cluster)
        keys = ClusterKeys(
            cluster=cluster,
            contribution=contribution.public.vkey,
            contribution_proof="",
            attestation=attestation.public.vkey,
            attestation_proof="",
            platform_root=self.platform_root(run_id, cluster).public.vkey,
            hardware=hardware,
        )
        return replace(
            keys,
            contribution_proof=prove_possession(
                enrolment(run_id, config_digest, keys, "contribution"), contribution
            ),
            attestation_proof=prove_possession(
                enrolment(run_id, config_digest, keys, "attestation"), attestation
            ),
        )


def hardware_digest(hardware: HardwareClass) -> str:
    """What an enrolment signs of a hardware class: the SHA-256 of its canonical JSON."""
    return canonical_digest(hardware.to_payload())


def enrolment(run_id: str, config_digest: str, keys: ClusterKeys, role: str) -> Enrolment:
    """The statement ``keys``' proof of possession for ``role`` signs (v2 when the keys name a
    hardware class, else v1): what the recorder and ``veritrain verify`` check it against."""
    return Enrolment(
        run_id=run_id,
        config_digest=config_digest,
        cluster=keys.cluster,
        role=role,
        hardware=hardware_digest(keys.hardware) if keys.hardware is not None else None,
    )


class ClusterSigner:
    """What one process signs for its cluster, in its own process."""

    def __init__(
        self,
        *,
        keys: ClusterKeyFolder,
        run_id: str,
        cluster: int,
        stage: int,
        store: ObjectStore,
        tee_type: str,
        launch_measurement: bytes,
        now: datetime | None = None,
    ) -> None:
        """``tee_type``: the back-end the speaker's attester comes from (attestation/registry.py;
        the genesis names it); ``launch_measurement``: what that attester reports."""
        self._run_id = run_id
        self._cluster = cluster
        self._stage = stage
        self._store = store
        self._contribution_key = keys.contribution_key(run_id, cluster)
        self._attester: Attester | None = None
        self._attested: list[str] = []
        if stage == SPEAKER_STAGE:
            self._attester = tee_backend(tee_type).attester(
                AttesterSetup(
                    attestation_key=keys.attestation_key(run_id, cluster),
                    platform_root=keys.platform_root(run_id, cluster),
                    launch_measurement=launch_measurement,
                    now=now or datetime.now(UTC),
                )
            )

    def sign(
        self, step: int, own: ContributionDigest, commitments: InnerCommitments | None
    ) -> StageContribution:
        """This process's signature over its own contribution digest of ``step`` and its
        per-inner-step ``commitments``, both stored."""
        return self._sign(step, own, commitments)

    def attest(
        self,
        request: AttestationRequest,
        own: ContributionDigest | None,
        commitments: InnerCommitments | None,
    ) -> ClusterEvidence | None:
        contribution = self._sign(request.step, own, commitments) if own is not None else None
        quote = self._quote(request) if self._attester is not None else None
        if contribution is None and quote is None:
            return None
        from trainer.recorder import ClusterEvidence

        return ClusterEvidence(
            cluster=self._cluster, stage=self._stage, contribution=contribution, quote=quote
        )

    def _sign(
        self, step: int, own: ContributionDigest, commitments: InnerCommitments | None
    ) -> StageContribution:
        if (own.cluster, own.stage) != (self._cluster, self._stage):
            raise RecorderError(
                f"cluster {self._cluster} stage {self._stage} was asked "
                f"to sign cluster {own.cluster} stage {own.stage}'s "
                "contribution: a process signs only its own"
            )
        if commitments is None or (
            commitments.run_id,
            commitments.step,
            commitments.cluster,
            commitments.stage,
        ) != (self._run_id, step, own.cluster, own.stage):
            raise RecorderError(
                f"cluster {own.cluster} stage {own.stage} was asked "
                f"to sign its step-{step} contribution without its own "
                "per-inner-step commitments for that step"
            )
        commitments_object = self._store.put_bytes(canonical_json(commitments.to_payload()))
        signed = sign_contribution(
            Contribution(
                run_id=self._run_id,
                step=step,
                cluster=own.cluster,
                stage=own.stage,
                payload_digest=own.digest,
                commitments_digest=commitments_object,
            ),
            self._contribution_key,
        )
        return StageContribution(
            stage=own.stage,
            digest=own.digest,
            signature_object=self._store.put_bytes(signed.to_json()),
            commitments=commitments_object,
        )

    def _quote(self, request: AttestationRequest) -> QuoteRef:
        assert self._attester is not None
        # The register holds one event per outer step, in order: a restarted attester replays the
        # recorded history first (its fresh register would otherwise start over).
        if request.statements[: len(self._attested)] != tuple(self._attested):
            raise RecorderError(
                f"cluster {self._cluster}: the coordinator's "
                "statement history no longer extends the one this "
                "cluster attested (a rewritten log?); refusing to quote"
            )
        for digest in request.statements[len(self._attested) :]:
            self._attester.extend(
                register=OUTER_STEP_REGISTER,
                digest=bytes.fromhex(digest),
                event_type=OUTER_STEP_EVENT,
            )
            self._attested.append(digest)
        if self._attested[-1] != request.statement_digest:
            raise RecorderError(
                f"cluster {self._cluster}: the request's statement is not the last of its history"
            )
        nonce = bytes.fromhex(request.nonce)
        binding = report_data(
            nonce, bytes.fromhex(request.prev_leaf), bytes.fromhex(request.statement_digest)
        )
        quote = self._attester.quote(report_data=binding, nonce=nonce)
        return QuoteRef(cluster=self._cluster, object=self._store.put_bytes(quote))
