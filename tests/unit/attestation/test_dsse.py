from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from attestation.dsse import Envelope, pae, sign_envelope, verify_envelope
from attestation.errors import ParseError, PayloadTypeError, ThresholdError
from attestation.keys import PublicKey, SigningKey

PAYLOAD_TYPE = "application/vnd.example+json"


def test_pae_matches_the_dsse_protocol_example(testvectors: Path) -> None:
    example = json.loads((testvectors / "kat.json").read_text())["dsse_pae"]
    encoded = pae(example["payload_type"], example["payload"].encode())
    assert encoded == example["pae"].encode()


def test_pae_counts_bytes_not_characters() -> None:
    assert pae("t", "é".encode()) == b"DSSEv1 1 t 2 \xc3\xa9"


def test_signed_envelope_verifies_and_returns_the_signed_bytes() -> None:
    key = SigningKey.generate("signer")
    envelope = sign_envelope(b'{"a":1}', PAYLOAD_TYPE, [key])
    verified = verify_envelope(
        Envelope.from_json(envelope.to_json()), keys=[key.public], payload_type=PAYLOAD_TYPE
    )
    assert verified.payload == b'{"a":1}'
    assert verified.payload_type == PAYLOAD_TYPE
    assert verified.signers == (key.public,)


def test_tampered_payload_fails() -> None:
    key = SigningKey.generate("signer")
    envelope = sign_envelope(b"step 1", PAYLOAD_TYPE, [key])
    forged = Envelope(payload=b"step 2", payload_type=PAYLOAD_TYPE, signatures=envelope.signatures)
    with pytest.raises(ThresholdError, match="at least 1 of 1 trusted keys, got 0"):
        verify_envelope(forged, keys=[key.public], payload_type=PAYLOAD_TYPE)


def test_payload_type_is_authenticated_and_checked() -> None:
    key = SigningKey.generate("signer")
    envelope = sign_envelope(b"x", PAYLOAD_TYPE, [key])
    relabelled = Envelope(payload=b"x", payload_type="other", signatures=envelope.signatures)
    with pytest.raises(ThresholdError):
        verify_envelope(relabelled, keys=[key.public], payload_type="other")
    with pytest.raises(PayloadTypeError, match="expected payloadType 'other'"):
        verify_envelope(envelope, keys=[key.public], payload_type="other")


def test_threshold_counts_distinct_trusted_keys() -> None:
    a, b, c = (SigningKey.generate(name) for name in "abc")
    trusted = [a.public, b.public, c.public]
    envelope = sign_envelope(b"x", PAYLOAD_TYPE, [a, b])
    assert verify_envelope(
        envelope, keys=trusted, payload_type=PAYLOAD_TYPE, threshold=2
    ).signers == (
        a.public,
        b.public,
    )
    with pytest.raises(ThresholdError, match="at least 3 of 3 trusted keys, got 2"):
        verify_envelope(envelope, keys=trusted, payload_type=PAYLOAD_TYPE, threshold=3)


def test_the_same_key_signing_twice_counts_once() -> None:
    a, b = SigningKey.generate("a"), SigningKey.generate("b")
    envelope = sign_envelope(b"x", PAYLOAD_TYPE, [a, a])
    with pytest.raises(ThresholdError, match="got 1"):
        verify_envelope(envelope, keys=[a.public, b.public], payload_type=PAYLOAD_TYPE, threshold=2)
    # Listing one raw key under two names does not make it two keys either.
    alias = PublicKey(name="a-alias", raw=a.public.raw)
    with pytest.raises(ValueError, match="threshold"):
        verify_envelope(envelope, keys=[a.public, alias], payload_type=PAYLOAD_TYPE, threshold=2)


def test_untrusted_signer_does_not_count() -> None:
    trusted, stranger = SigningKey.generate("trusted"), SigningKey.generate("stranger")
    envelope = sign_envelope(b"x", PAYLOAD_TYPE, [stranger])
    with pytest.raises(ThresholdError):
        verify_envelope(envelope, keys=[trusted.public], payload_type=PAYLOAD_TYPE)


def test_keyid_is_only_a_hint() -> None:
    key = SigningKey.generate("signer")
    signed = sign_envelope(b"x", PAYLOAD_TYPE, [key]).to_dict()
    signed["signatures"][0]["keyid"] = "not-a-key-id"
    assert (
        verify_envelope(
            Envelope.from_dict(signed), keys=[key.public], payload_type=PAYLOAD_TYPE
        ).payload
        == b"x"
    )
    del signed["signatures"][0]["keyid"]  # keyid is optional (envelope.md)
    assert Envelope.from_dict(signed).signatures[0].keyid == ""
    verify_envelope(Envelope.from_dict(signed), keys=[key.public], payload_type=PAYLOAD_TYPE)


def test_url_safe_and_unpadded_base64_are_accepted() -> None:
    key = SigningKey.generate("signer")
    payload = bytes(range(250, 256)) * 3  # encodes with '+' and '/' in standard base64
    envelope = sign_envelope(payload, PAYLOAD_TYPE, [key])
    url_safe = {
        "payload": base64.urlsafe_b64encode(payload).decode().rstrip("="),
        "payloadType": PAYLOAD_TYPE,
        "signatures": [
            {"keyid": s.keyid, "sig": base64.urlsafe_b64encode(s.sig).decode()}
            for s in envelope.signatures
        ],
        "someFutureField": True,  # envelope.md: consumers MUST ignore unrecognized fields
    }
    encoded_payload = str(url_safe["payload"])
    assert "-" in encoded_payload or "_" in encoded_payload
    parsed = Envelope.from_json(json.dumps(url_safe).encode())
    assert verify_envelope(parsed, keys=[key.public], payload_type=PAYLOAD_TYPE).payload == payload


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda e: e.pop("payload"), "missing field payload"),
        (lambda e: e.update(payload="ab+c-"), "one base64 alphabet"),
        (lambda e: e.update(payload="a"), "expected base64"),
        (lambda e: e["signatures"][0].pop("sig"), "missing field sig"),
        (lambda e: e.update(signatures={}), "expected a JSON array"),
    ],
)
def test_malformed_envelopes_are_rejected(mutate: object, message: str) -> None:
    envelope = sign_envelope(b"x", PAYLOAD_TYPE, [SigningKey.generate("k")]).to_dict()
    assert callable(mutate)
    mutate(envelope)
    with pytest.raises(ParseError, match=message):
        Envelope.from_json(json.dumps(envelope).encode())


def test_truncated_envelope_is_a_parse_error() -> None:
    data = sign_envelope(b"x", PAYLOAD_TYPE, [SigningKey.generate("k")]).to_json()
    with pytest.raises(ParseError, match="not valid JSON"):
        Envelope.from_json(data[:-5])


def test_threshold_outside_one_to_n_is_a_caller_error() -> None:
    key = SigningKey.generate("k")
    envelope = sign_envelope(b"x", PAYLOAD_TYPE, [key])
    for threshold in (0, 2):
        with pytest.raises(ValueError, match=r"threshold: expected 1\.\.1"):
            verify_envelope(
                envelope, keys=[key.public], payload_type=PAYLOAD_TYPE, threshold=threshold
            )
