"""DSSE v1: Dead Simple Signing Envelopes with Ed25519 and t-of-n verification.

Protocol (secure-systems-lab/dsse, protocol.md v1.0):
  SIGNATURE = Sign(PAE(UTF8(PAYLOAD_TYPE), SERIALIZED_BODY))
  PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body
with LEN the ASCII decimal byte length, no leading zeros.

Envelope (envelope.md v1.0): ``{"payload": b64, "payloadType": str, "signatures": [{"keyid":
str, "sig": b64}]}``. ``keyid`` is optional and unauthenticated, so it only narrows which keys
are tried; verifiers must accept standard and URL-safe base64; unknown fields are ignored.

Verification hands back the payload bytes it checked (:class:`VerifiedPayload`): callers parse
*those*, never the envelope again, so what they act on is exactly what was signed.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attestation._schema import as_object, encode_base64, read_list, read_str
from attestation.canonical import canonical_json
from attestation.errors import ParseError, PayloadTypeError, SignatureError, ThresholdError
from attestation.keys import PublicKey, SigningKey


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 Pre-Authentication Encoding of ``payload`` under ``payload_type``."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


@dataclass(frozen=True, kw_only=True)
class Signature:
    keyid: str
    """Unauthenticated hint: the hex SHA-256 of the signer's raw public key, or ""."""
    sig: bytes
    """Raw 64-byte Ed25519 signature over the PAE."""


@dataclass(frozen=True, kw_only=True)
class Envelope:
    payload: bytes
    payload_type: str
    signatures: tuple[Signature, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "payload": encode_base64(self.payload),
            "payloadType": self.payload_type,
            "signatures": [
                {"keyid": s.keyid, "sig": encode_base64(s.sig)} for s in self.signatures
            ],
        }

    def to_json(self) -> bytes:
        """Canonical JSON (RFC 8785), so an envelope is a stable content-addressed object."""
        return canonical_json(self.to_dict())

    @classmethod
    def from_dict(cls, value: Any) -> Envelope:
        what = "DSSE envelope"
        obj = as_object(value, what=what)
        for key in ("payload", "payloadType", "signatures"):
            if key not in obj:
                raise ParseError(f"{what}: missing field {key}")
        signatures = []
        for i, item in enumerate(read_list(obj, "signatures", what=what)):
            where = f"{what}.signatures[{i}]"
            entry = as_object(item, what=where)
            if "sig" not in entry:
                raise ParseError(f"{where}: missing field sig")
            # envelope.md: an unset keyid is treated the same as an empty one.
            keyid = read_str(entry, "keyid", what=where) if "keyid" in entry else ""
            sig = decode_dsse_base64(read_str(entry, "sig", what=where), what=f"{where}.sig")
            signatures.append(Signature(keyid=keyid, sig=sig))
        return cls(
            payload=decode_dsse_base64(read_str(obj, "payload", what=what), what=f"{what}.payload"),
            payload_type=read_str(obj, "payloadType", what=what),
            signatures=tuple(signatures),
        )

    @classmethod
    def from_json(cls, data: bytes) -> Envelope:
        """Parse any DSSE JSON envelope (it need not be canonical: only the PAE is signed)."""
        try:
            value = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ParseError(f"DSSE envelope: not valid JSON: {exc}") from None
        return cls.from_dict(value)


@dataclass(frozen=True, kw_only=True)
class VerifiedPayload:
    """What a successful :func:`verify_envelope` vouches for."""

    payload_type: str
    payload: bytes
    signers: tuple[PublicKey, ...]
    """The distinct trusted keys whose signatures verified, in the order given."""


def sign_envelope(payload: bytes, payload_type: str, keys: Sequence[SigningKey]) -> Envelope:
    """Sign ``payload`` with every key in ``keys`` (at least one)."""
    if not keys:
        raise ValueError("keys: expected at least one signing key, got none")
    message = pae(payload_type, payload)
    signatures = tuple(Signature(keyid=k.public.fingerprint, sig=k.sign(message)) for k in keys)
    return Envelope(payload=payload, payload_type=payload_type, signatures=signatures)


def verify_envelope(
    envelope: Envelope, *, keys: Sequence[PublicKey], payload_type: str, threshold: int = 1
) -> VerifiedPayload:
    """Verify a (t, n) envelope: at least ``threshold`` of the distinct ``keys`` signed it.

    Follows the multi-signature procedure of DSSE protocol.md: every signature is tried
    against the trusted keys (narrowed by keyid when one is given), a key counts once however
    many of its signatures appear, and the payload type is checked after the signatures.
    """
    # "n unique trusted public keys": one raw key listed under two names is still one key.
    by_raw: dict[bytes, PublicKey] = {}
    for key in keys:
        by_raw.setdefault(key.raw, key)
    trusted = list(by_raw.values())
    if not 1 <= threshold <= len(trusted):
        raise ValueError(
            f"threshold: expected 1..{len(trusted)} (the number of distinct keys), got {threshold}"
        )
    message = pae(envelope.payload_type, envelope.payload)
    accepted: set[bytes] = set()
    for signature in envelope.signatures:
        for key in _candidates(trusted, signature.keyid):
            if key.raw in accepted:
                continue
            try:
                key.verify(signature.sig, message)
            except SignatureError:
                continue  # protocol.md: "Skip over if the verification fails."
            accepted.add(key.raw)
            break
    if len(accepted) < threshold:
        raise ThresholdError(
            f"DSSE envelope: expected valid signatures from at least {threshold} of "
            f"{len(trusted)} trusted keys, got {len(accepted)}"
        )
    if envelope.payload_type != payload_type:
        raise PayloadTypeError(
            f"DSSE envelope: expected payloadType {payload_type!r}, got {envelope.payload_type!r}"
        )
    signers = tuple(k for k in trusted if k.raw in accepted)
    return VerifiedPayload(
        payload_type=envelope.payload_type, payload=envelope.payload, signers=signers
    )


def decode_dsse_base64(text: str, *, what: str) -> bytes:
    """Decode standard or URL-safe base64, padded or not (DSSE protocol.md: verifiers MUST
    accept either alphabet). Mixing the two alphabets in one string is refused."""
    standard = "+" in text or "/" in text
    url_safe = "-" in text or "_" in text
    if standard and url_safe:
        raise ParseError(f"{what}: expected one base64 alphabet, got both '+/' and '-_'")
    normalised = text.replace("-", "+").replace("_", "/") if url_safe else text
    normalised += "=" * (-len(normalised) % 4)
    try:
        return base64.b64decode(normalised, validate=True)
    except (binascii.Error, ValueError):
        raise ParseError(f"{what}: expected base64, got {text[:80]!r}") from None


def _candidates(trusted: Sequence[PublicKey], keyid: str) -> list[PublicKey]:
    # protocol.md: keyid "MUST NOT be used for security decisions; it may only be used to
    # narrow the selection of possible keys to try". The hinted key is tried first; a wrong
    # or empty hint only costs the other tries, never a valid signature.
    hinted = [k for k in trusted if k.fingerprint == keyid]
    return hinted + [k for k in trusted if k.fingerprint != keyid]
