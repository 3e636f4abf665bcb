"""Our DSSE envelopes against an independent implementation: securesystemslib's ``Envelope``
with its Ed25519 key verification (tests only; securesystemslib is a dev dependency)."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.exceptions import VerificationError as SslibVerificationError
from securesystemslib.signer import CryptoSigner, SSlibKey  # type: ignore[attr-defined]

from attestation.dsse import Envelope, sign_envelope, verify_envelope
from attestation.keys import PublicKey, SigningKey
from attestation.statement import IN_TOTO_PAYLOAD_TYPE


def _sslib_key(public: PublicKey) -> SSlibKey:
    # Same key, described the securesystemslib way; keyid = our DSSE keyid hint.
    return SSlibKey(public.fingerprint, "ed25519", "ed25519", {"public": public.raw.hex()})


def test_our_envelope_verifies_with_securesystemslib() -> None:
    a, b = SigningKey.generate("cluster-0"), SigningKey.generate("cluster-1")
    envelope = sign_envelope(b'{"_type":"x"}', IN_TOTO_PAYLOAD_TYPE, [a, b])

    theirs = SslibEnvelope.from_dict(json.loads(envelope.to_json()))
    accepted = theirs.verify([_sslib_key(a.public), _sslib_key(b.public)], threshold=2)

    assert set(accepted) == {a.public.fingerprint, b.public.fingerprint}
    assert theirs.payload == b'{"_type":"x"}'
    assert theirs.pae() == b'DSSEv1 28 application/vnd.in-toto+json 13 {"_type":"x"}'


def test_securesystemslib_rejects_our_envelope_when_tampered() -> None:
    key = SigningKey.generate("k")
    data = json.loads(sign_envelope(b"step 1", IN_TOTO_PAYLOAD_TYPE, [key]).to_json())
    data["payload"] = "c3RlcCAy"  # "step 2"
    with pytest.raises(SslibVerificationError):
        SslibEnvelope.from_dict(data).verify([_sslib_key(key.public)], threshold=1)


def test_securesystemslib_envelope_verifies_with_ours() -> None:
    private = Ed25519PrivateKey.generate()
    signer = CryptoSigner(private)
    theirs = SslibEnvelope(b"hello world", "http://example.com/HelloWorld", {})
    theirs.sign(signer)

    raw = bytes.fromhex(signer.public_key.keyval["public"])
    ours = Envelope.from_json(json.dumps(theirs.to_dict()).encode())
    verified = verify_envelope(
        ours, keys=[PublicKey(name="sslib", raw=raw)], payload_type="http://example.com/HelloWorld"
    )
    assert verified.payload == b"hello world"
