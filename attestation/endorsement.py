"""Endorsements: a platform root key vouches for an attestation key.

In hardware TEEs a vendor root (Intel's SGX/TDX root CA, AMD's ARK/ASK) certifies the key that
signs quotes, together with the platform's TCB level. Here the platform root is an Ed25519 key
of the operator and the "certificate" is a signed canonical-JSON object:

    {"body": {"attestation_key": <C2SP vkey>, "issuer": <C2SP vkey of the root>,
              "not_after": RFC 3339, "not_before": RFC 3339, "svn": int, "tee_type": str},
     "signature": base64(Ed25519(PAE(ENDORSEMENT_TYPE, canonical_json(body))))}

Signing the DSSE PAE with a payload type of its own keeps an endorsement signature from ever
being valid as a quote or envelope signature (domain separation). ``issuer`` is only a hint
for finding the root; the verifier trusts roots it was given, never the one named here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from attestation._schema import (
    as_object,
    encode_base64,
    format_timestamp,
    load_object,
    read_base64,
    read_int,
    read_str,
    read_timestamp,
    require_fields,
)
from attestation.canonical import canonical_json
from attestation.dsse import pae
from attestation.errors import KeyFormatError, ParseError
from attestation.keys import PublicKey, SigningKey

ENDORSEMENT_TYPE = "application/vnd.veritrain.endorsement.v1+json"

_TEE_TYPE = re.compile(r"[a-z][a-z0-9-]{0,31}")


def check_tee_type(tee_type: str) -> None:
    """A TEE type is a short lower-case label: "software", "tdx", "sev-snp"."""
    if _TEE_TYPE.fullmatch(tee_type) is None:
        raise ValueError(f"tee_type: expected a lower-case label like 'software', got {tee_type!r}")


@dataclass(frozen=True, kw_only=True)
class EndorsementBody:
    attestation_key: PublicKey
    issuer: PublicKey
    tee_type: str
    svn: int
    not_before: datetime
    not_after: datetime

    def __post_init__(self) -> None:
        check_tee_type(self.tee_type)
        if self.svn < 0:
            raise ValueError(f"svn: expected >= 0, got {self.svn}")
        # Stored at whole-second precision so the body survives a JSON round trip unchanged.
        for name in ("not_before", "not_after"):
            value: datetime = getattr(self, name)
            if value.tzinfo is None:
                raise ValueError(f"{name}: expected a timezone-aware datetime, got {value}")
            object.__setattr__(self, name, value.replace(microsecond=0))
        if self.not_after <= self.not_before:
            raise ValueError(
                f"not_after: expected later than not_before {self.not_before}, got {self.not_after}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "attestation_key": self.attestation_key.vkey,
            "issuer": self.issuer.vkey,
            "not_after": format_timestamp(self.not_after),
            "not_before": format_timestamp(self.not_before),
            "svn": self.svn,
            "tee_type": self.tee_type,
        }

    def signed_message(self) -> bytes:
        return pae(ENDORSEMENT_TYPE, canonical_json(self.to_dict()))

    @classmethod
    def from_dict(cls, value: Any, *, what: str) -> EndorsementBody:
        obj = as_object(value, what=what)
        require_fields(
            obj,
            required={"attestation_key", "issuer", "not_after", "not_before", "svn", "tee_type"},
            what=what,
        )
        try:
            return cls(
                attestation_key=_read_vkey(obj, "attestation_key", what=what),
                issuer=_read_vkey(obj, "issuer", what=what),
                tee_type=read_str(obj, "tee_type", what=what),
                svn=read_int(obj, "svn", what=what),
                not_before=read_timestamp(obj, "not_before", what=what),
                not_after=read_timestamp(obj, "not_after", what=what),
            )
        except ValueError as exc:
            raise ParseError(f"{what}: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class Endorsement:
    body: EndorsementBody
    signature: bytes

    def to_dict(self) -> dict[str, Any]:
        return {"body": self.body.to_dict(), "signature": encode_base64(self.signature)}

    def to_json(self) -> bytes:
        return canonical_json(self.to_dict())

    @classmethod
    def from_dict(cls, value: Any, *, what: str = "endorsement") -> Endorsement:
        obj = as_object(value, what=what)
        require_fields(obj, required={"body", "signature"}, what=what)
        return cls(
            body=EndorsementBody.from_dict(obj["body"], what=f"{what}.body"),
            signature=read_base64(obj, "signature", what=what),
        )

    @classmethod
    def from_json(cls, data: bytes) -> Endorsement:
        return cls.from_dict(load_object(data, what="endorsement"))


def endorse(
    *,
    platform_root: SigningKey,
    attestation_key: PublicKey,
    tee_type: str,
    svn: int,
    not_before: datetime,
    not_after: datetime,
) -> Endorsement:
    """The platform root's signed statement that ``attestation_key`` belongs to a ``tee_type``
    platform at security version ``svn`` during [not_before, not_after]."""
    body = EndorsementBody(
        attestation_key=attestation_key,
        issuer=platform_root.public,
        tee_type=tee_type,
        svn=svn,
        not_before=not_before,
        not_after=not_after,
    )
    return Endorsement(body=body, signature=platform_root.sign(body.signed_message()))


def _read_vkey(obj: dict[str, Any], key: str, *, what: str) -> PublicKey:
    text = read_str(obj, key, what=what)
    try:
        parsed = PublicKey.from_vkey(text)
    except KeyFormatError as exc:
        raise ParseError(f"{what}.{key}: {exc}") from None
    if parsed.vkey != text:  # from_vkey strips whitespace; the canonical form must match exactly
        raise ParseError(f"{what}.{key}: expected a canonical vkey string, got {text!r}")
    return parsed
