from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest

from attestation.contribution import (
    CONTRIBUTION_PAYLOAD_TYPE,
    Contribution,
    sign_contribution,
    verify_contribution,
)
from attestation.dsse import Envelope, sign_envelope
from attestation.errors import ContributionMismatchError, ParseError, ThresholdError
from attestation.keys import SigningKey


def _contribution(**overrides: object) -> Contribution:
    fields: dict[str, object] = {
        "run_id": "run-7",
        "step": 12,
        "cluster": 1,
        "stage": 0,
        "payload_digest": hashlib.sha256(b"pseudo-gradient of cluster 1").hexdigest(),
        "commitments_digest": hashlib.sha256(b"inner-step commitments of cluster 1").hexdigest(),
    }
    fields.update(overrides)
    return Contribution(**fields)  # type: ignore[arg-type]


def test_cluster_signature_verifies_and_returns_the_signed_contribution() -> None:
    key = SigningKey.generate("cluster-1")
    envelope = Envelope.from_json(sign_contribution(_contribution(), key).to_json())
    assert envelope.payload_type == CONTRIBUTION_PAYLOAD_TYPE
    assert (
        verify_contribution(envelope, key=key.public, expected=_contribution()) == _contribution()
    )


def test_another_clusters_key_does_not_verify() -> None:
    envelope = sign_contribution(_contribution(), SigningKey.generate("cluster-1"))
    with pytest.raises(ThresholdError):
        verify_contribution(envelope, key=SigningKey.generate("cluster-0").public)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("run_id", "run-8"),
        ("step", 13),
        ("cluster", 0),
        ("stage", 1),
        ("payload_digest", hashlib.sha256(b"other").hexdigest()),
        ("commitments_digest", hashlib.sha256(b"other commitments").hexdigest()),
    ],
)
def test_signed_contribution_must_be_the_one_the_ledger_records(field: str, value: object) -> None:
    key = SigningKey.generate("cluster-1")
    envelope = sign_contribution(_contribution(), key)
    changes: dict[str, Any] = {field: value}
    expected = dataclasses.replace(_contribution(), **changes)
    with pytest.raises(ContributionMismatchError, match=f"contribution {field}: expected"):
        verify_contribution(envelope, key=key.public, expected=expected)


def test_malformed_contribution_payload_is_a_parse_error() -> None:
    key = SigningKey.generate("cluster-1")
    payload = json.dumps({"run_id": "r", "step": 1}, separators=(",", ":"), sort_keys=True).encode()
    envelope = sign_envelope(payload, CONTRIBUTION_PAYLOAD_TYPE, [key])
    with pytest.raises(
        ParseError, match="missing field\\(s\\) cluster, commitments_digest, payload_digest, stage"
    ):
        verify_contribution(envelope, key=key.public)


def test_contribution_fields_are_checked_when_built() -> None:
    with pytest.raises(ValueError, match="cluster: expected >= 0, got -1"):
        _contribution(cluster=-1)
    with pytest.raises(ValueError, match="payload_digest"):
        _contribution(payload_digest="sha256:abc")
