"""Per-cluster contribution signatures.

DESIGN.md §5: "Each cluster signs its own contribution digest with its own key; the outer step
records all of them." A contribution statement names the run, outer step, cluster, pipeline stage,
the SHA-256 of the cluster's (compressed) pseudo-gradient payload and the SHA-256 of its
per-inner-step commitments (records/commitments.py: what the stage's parameters were after each
inner step, so a dispute narrows to one of them). It travels as a DSSE envelope, so any DSSE tool
can check it, with its own payload type so the signature can never be taken for another kind of
statement.
"""

from __future__ import annotations

from dataclasses import dataclass

from attestation._schema import check_sha256_hex, load_object, read_int, read_str, require_fields
from attestation.canonical import canonical_json
from attestation.dsse import Envelope, sign_envelope, verify_envelope
from attestation.errors import ContributionMismatchError, ParseError
from attestation.keys import PublicKey, SigningKey

CONTRIBUTION_PAYLOAD_TYPE = "application/vnd.veritrain.contribution.v1+json"

_FIELDS = ("run_id", "step", "cluster", "stage", "payload_digest", "commitments_digest")


@dataclass(frozen=True, kw_only=True)
class Contribution:
    run_id: str
    step: int
    cluster: int
    """Index of the cluster (outer replica) in rank order."""
    stage: int
    """Pipeline stage whose shard of the pseudo-gradient this is."""
    payload_digest: str
    """Hex SHA-256 of the contribution payload exactly as exchanged."""
    commitments_digest: str
    """Hex SHA-256 of the stage's per-inner-step commitments object (its canonical JSON)."""

    def __post_init__(self) -> None:
        if not self.run_id:
            raise ValueError("run_id: expected a non-empty run id, got ''")
        for name in ("step", "cluster", "stage"):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"{name}: expected >= 0, got {value}")
        check_sha256_hex(self.payload_digest, "payload_digest")
        check_sha256_hex(self.commitments_digest, "commitments_digest")

    def to_json(self) -> bytes:
        return canonical_json(
            {
                "cluster": self.cluster,
                "commitments_digest": self.commitments_digest,
                "payload_digest": self.payload_digest,
                "run_id": self.run_id,
                "stage": self.stage,
                "step": self.step,
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> Contribution:
        what = "contribution"
        obj = load_object(data, what=what)
        require_fields(obj, required=set(_FIELDS), what=what)
        try:
            return cls(
                run_id=read_str(obj, "run_id", what=what),
                step=read_int(obj, "step", what=what),
                cluster=read_int(obj, "cluster", what=what),
                stage=read_int(obj, "stage", what=what),
                payload_digest=read_str(obj, "payload_digest", what=what),
                commitments_digest=read_str(obj, "commitments_digest", what=what),
            )
        except ValueError as exc:
            raise ParseError(f"{what}: {exc}") from None


def sign_contribution(contribution: Contribution, key: SigningKey) -> Envelope:
    """The cluster's DSSE envelope over its contribution statement."""
    return sign_envelope(contribution.to_json(), CONTRIBUTION_PAYLOAD_TYPE, [key])


def verify_contribution(
    envelope: Envelope, *, key: PublicKey, expected: Contribution | None = None
) -> Contribution:
    """Check the cluster's signature and return the contribution it signed.

    With ``expected`` (what the ledger records for this cluster and step), also require that
    the signed statement is exactly that one, field by field.
    """
    verified = verify_envelope(envelope, keys=[key], payload_type=CONTRIBUTION_PAYLOAD_TYPE)
    signed = Contribution.from_json(verified.payload)
    if expected is not None:
        for name in _FIELDS:
            want, got = getattr(expected, name), getattr(signed, name)
            if want != got:
                raise ContributionMismatchError(
                    f"contribution {name}: expected {want!r}, got {got!r}"
                )
    return signed
