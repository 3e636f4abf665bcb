"""Quotes: signed reports of an attester's measurements, bound to a caller's data and nonce.

A quote is canonical JSON:

    {"body": {"debug": bool, "measurements": {"launch": hex(48), "registers": [hex(48) x 4]},
              "nonce": hex, "report_data": hex(64), "svn": int, "tee_type": str},
     "endorsement": <endorsement object>,
     "signature": base64(Ed25519(PAE(QUOTE_TYPE, canonical_json(body))))}

It carries the endorsement of its signing key, as a TDX quote carries its PCK certificate
chain, so a quote plus a set of trusted platform roots is enough to check who signed it.

report_data is 64 bytes, the size of TDX REPORTDATA, SEV-SNP REPORT_DATA and the Linux
configfs-tsm ``inblob`` limit, so the same binding works for a hardware back-end. veritrain
fills it with :func:`report_data`, which binds the quote to a position in the ledger.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from attestation._schema import (
    as_hex,
    as_object,
    encode_base64,
    load_object,
    read_base64,
    read_bool,
    read_hex,
    read_int,
    read_list,
    read_str,
    require_fields,
)
from attestation.canonical import canonical_json
from attestation.dsse import pae
from attestation.endorsement import Endorsement, check_tee_type
from attestation.errors import ParseError
from attestation.keys import SigningKey
from attestation.measurement import REGISTER_COUNT, REGISTER_SIZE, RegisterValues

QUOTE_TYPE = "application/vnd.veritrain.quote.v1+json"

REPORT_DATA_SIZE = 64
NONCE_SIZES = frozenset(range(16, 65))
"""A nonce is 16..64 bytes: enough entropy to be unguessable, small enough for any TEE."""

_LEAF_HASH_SIZE = 32  # RFC 9162 leaf hash (SHA-256)
_STATEMENT_DIGEST_SIZE = 32  # SHA-256 of the DSSE payload


def report_data(nonce: bytes, prev_leaf_hash: bytes, statement_digest: bytes) -> bytes:
    """report_data = SHA-512(nonce || prev leaf hash || statement digest) (DESIGN.md §5).

    The last two parts have fixed sizes (32 bytes each), so the concatenation is unambiguous
    whatever the nonce length. Binding the previous leaf hash pins the quote to one place in
    the run's hash chain; binding the statement digest pins it to one outer step's provenance.
    """
    _check_nonce(nonce)
    if len(prev_leaf_hash) != _LEAF_HASH_SIZE:
        raise ValueError(f"prev_leaf_hash: expected 32 bytes, got {len(prev_leaf_hash)}")
    if len(statement_digest) != _STATEMENT_DIGEST_SIZE:
        raise ValueError(f"statement_digest: expected 32 bytes, got {len(statement_digest)}")
    return hashlib.sha512(nonce + prev_leaf_hash + statement_digest).digest()


@dataclass(frozen=True, kw_only=True)
class QuoteBody:
    """The signed part of a quote."""

    tee_type: str
    svn: int
    debug: bool
    launch_measurement: bytes
    registers: RegisterValues
    report_data: bytes
    nonce: bytes

    def __post_init__(self) -> None:
        check_tee_type(self.tee_type)
        if self.svn < 0:
            raise ValueError(f"svn: expected >= 0, got {self.svn}")
        if len(self.launch_measurement) != REGISTER_SIZE:
            raise ValueError(
                f"launch_measurement: expected {REGISTER_SIZE} "
                f"bytes, got {len(self.launch_measurement)}"
            )
        object.__setattr__(self, "registers", tuple(self.registers))
        if len(self.registers) != REGISTER_COUNT or any(
            len(r) != REGISTER_SIZE for r in self.registers
        ):
            raise ValueError(
                f"registers: expected {REGISTER_COUNT} values of {REGISTER_SIZE} bytes, "
                f"got {[len(r) for r in self.registers]}"
            )
        if len(self.report_data) != REPORT_DATA_SIZE:
            raise ValueError(
                f"report_data: expected {REPORT_DATA_SIZE} bytes, got {len(self.report_data)}"
            )
        _check_nonce(self.nonce)

    def to_dict(self) -> dict[str, Any]:
        return {
            "debug": self.debug,
            "measurements": {
                "launch": self.launch_measurement.hex(),
                "registers": [r.hex() for r in self.registers],
            },
            "nonce": self.nonce.hex(),
            "report_data": self.report_data.hex(),
            "svn": self.svn,
            "tee_type": self.tee_type,
        }

    def signed_message(self) -> bytes:
        return pae(QUOTE_TYPE, canonical_json(self.to_dict()))

    @classmethod
    def from_dict(cls, value: Any, *, what: str) -> QuoteBody:
        obj = as_object(value, what=what)
        require_fields(
            obj,
            required={"debug", "measurements", "nonce", "report_data", "svn", "tee_type"},
            what=what,
        )
        where = f"{what}.measurements"
        measurements = as_object(obj["measurements"], what=where)
        require_fields(measurements, required={"launch", "registers"}, what=where)
        registers = read_list(measurements, "registers", what=where)
        if len(registers) != REGISTER_COUNT:
            raise ParseError(
                f"{where}.registers: expected {REGISTER_COUNT} values, got {len(registers)}"
            )
        sizes = frozenset({REGISTER_SIZE})
        try:
            return cls(
                tee_type=read_str(obj, "tee_type", what=what),
                svn=read_int(obj, "svn", what=what),
                debug=read_bool(obj, "debug", what=what),
                launch_measurement=read_hex(measurements, "launch", what=where, sizes=sizes),
                registers=tuple(
                    as_hex(r, what=f"{where}.registers[{i}]", sizes=sizes)
                    for i, r in enumerate(registers)
                ),
                report_data=read_hex(obj, "report_data", what=what, sizes={REPORT_DATA_SIZE}),
                nonce=read_hex(obj, "nonce", what=what, sizes=NONCE_SIZES),
            )
        except ValueError as exc:
            raise ParseError(f"{what}: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class Quote:
    body: QuoteBody
    endorsement: Endorsement
    signature: bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "body": self.body.to_dict(),
            "endorsement": self.endorsement.to_dict(),
            "signature": encode_base64(self.signature),
        }

    def to_json(self) -> bytes:
        return canonical_json(self.to_dict())

    @classmethod
    def from_json(cls, data: bytes) -> Quote:
        """Strict parse: canonical JSON with exactly the fields above, or :class:`ParseError`."""
        what = "quote"
        obj = load_object(data, what=what)
        require_fields(obj, required={"body", "endorsement", "signature"}, what=what)
        return cls(
            body=QuoteBody.from_dict(obj["body"], what=f"{what}.body"),
            endorsement=Endorsement.from_dict(obj["endorsement"], what=f"{what}.endorsement"),
            signature=read_base64(obj, "signature", what=what),
        )


def sign_quote(body: QuoteBody, *, attestation_key: SigningKey, endorsement: Endorsement) -> Quote:
    """Sign ``body`` with the attestation key and attach the key's endorsement.

    This only assembles and signs; it vouches for nothing. Whether the signer was entitled to
    make these claims is for :func:`attestation.verifier.verify_quote` to decide.
    """
    if endorsement.body.attestation_key != attestation_key.public:
        raise ValueError(
            f"endorsement: expected one for attestation key {attestation_key.public.vkey}, "
            f"got one for {endorsement.body.attestation_key.vkey}"
        )
    return Quote(
        body=body, endorsement=endorsement, signature=attestation_key.sign(body.signed_message())
    )


def _check_nonce(nonce: bytes) -> None:
    if len(nonce) not in NONCE_SIZES:
        raise ValueError(f"nonce: expected 16..64 bytes, got {len(nonce)}")
