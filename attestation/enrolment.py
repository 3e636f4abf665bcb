"""Proofs of possession: a cluster enrols a key in a run by signing, with that key, a
statement naming the run, its configuration and the key's role -- and, since enrolment v2, the
hardware class the cluster's own process measured (veritrain/hardware.py).

A genesis lists each cluster's contribution and attestation keys with these proofs, so a
verifier knows that whoever enrolled a key held its private half when the run was created,
for this run and this configuration (a proof cannot be replayed into another run). The
statement is small and fixed::

    the canonical JSON (RFC 8785) of
    {"cluster": j, "config_digest": "<hex>", "purpose": "veritrain/enrolment/v1",
     "role": "contribution" | "attestation", "run_id": "<run>"}

or, for v2, the same with ``"purpose": "veritrain/enrolment/v2"`` and ``"hardware": "<hex>"``,
the SHA-256 of the canonical JSON of the cluster's hardware class: what the operator, who
never holds a cluster's keys, cannot change. The proof is the key's Ed25519 signature over
those bytes, base64 encoded. Runs recorded before v2 carry v1 proofs and no hardware class.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from attestation.canonical import canonical_json
from attestation.errors import AttestationError
from attestation.keys import PublicKey, SigningKey

PURPOSE = "veritrain/enrolment/v1"
PURPOSE_V2 = "veritrain/enrolment/v2"
"""v2 adds the digest of the hardware class the cluster measured."""
ROLES = ("contribution", "attestation")


class EnrolmentError(AttestationError):
    """A proof of possession does not verify for the key, run, configuration and role."""


@dataclass(frozen=True, kw_only=True)
class Enrolment:
    run_id: str
    config_digest: str
    cluster: int
    role: str
    hardware: str | None = None
    """Hex SHA-256 of the canonical JSON of the hardware class the cluster's process measured
    (v2); None for a v1 enrolment, which names none."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role: expected one of {ROLES}, got {self.role!r}")

    def message(self) -> bytes:
        statement: dict[str, object] = {
            "cluster": self.cluster,
            "config_digest": self.config_digest,
            "purpose": PURPOSE if self.hardware is None else PURPOSE_V2,
            "role": self.role,
            "run_id": self.run_id,
        }
        if self.hardware is not None:
            statement["hardware"] = self.hardware
        return canonical_json(statement)


def prove_possession(enrolment: Enrolment, key: SigningKey) -> str:
    """The base64 proof that ``key``'s holder enrols it for ``enrolment``."""
    return base64.b64encode(key.sign(enrolment.message())).decode("ascii")


def verify_possession(enrolment: Enrolment, key: PublicKey, proof: str) -> None:
    """Return None if ``proof`` is ``key``'s signature over ``enrolment``, else raise."""
    try:
        signature = base64.b64decode(proof, validate=True)
    except (binascii.Error, ValueError):
        raise EnrolmentError(
            f"cluster {enrolment.cluster} {enrolment.role} key: the proof is not base64"
        ) from None
    try:
        key.verify(signature, enrolment.message())
    except AttestationError as exc:
        raise EnrolmentError(
            f"cluster {enrolment.cluster} {enrolment.role} key "
            f"{key.vkey}: the proof of possession does not verify "
            f"for run {enrolment.run_id!r} and configuration {enrolment.config_digest[:16]}…"
            + (
                f" and hardware class {enrolment.hardware[:16]}…"
                if enrolment.hardware is not None
                else ""
            )
            + f": {exc}"
        ) from None


FINGERPRINT_PURPOSE = "veritrain/cluster-keys/v1"


def cluster_fingerprint(*, contribution: str, attestation: str, platform_root: str) -> str:
    """One hex SHA-256 that names a cluster's three enrolled keys, for a person to compare.

    A cluster's operator computes it from its own key folder (``veritrain cluster-keys``) and
    compares it with the one a run's page and ``veritrain verify --json`` show: equal means
    the genesis enrols the keys the cluster holds, not keys the coordinator made in its place.
    Over the canonical JSON of the three verifier keys (the ``PublicKey.vkey`` form, so one
    key written two ways has one fingerprint)."""
    keys = {
        "attestation": PublicKey.from_vkey(attestation).vkey,
        "contribution": PublicKey.from_vkey(contribution).vkey,
        "platform_root": PublicKey.from_vkey(platform_root).vkey,
        "purpose": FINGERPRINT_PURPOSE,
    }
    return hashlib.sha256(canonical_json(keys)).hexdigest()
