"""C2SP tlog-cosignature (https://c2sp.org/tlog-cosignature): timestamped Ed25519
``cosignature/v1`` signatures of a checkpoint, signature type 0x04.

A cosignature is a C2SP signed-note signature line on the checkpoint::

    — <cosigner name> base64(key id || timestamp || Ed25519 signature)

    key id     = SHA-256(<name> || "\\n" || 0x04 || 32-byte public key)[:4]
    timestamp  = u64, big-endian, POSIX seconds, at most 2^63 - 1
    message    = "cosignature/v1\\n" "time <timestamp>\\n" || the checkpoint's note text

The message covers the whole note text, extension lines included, but not the cosigner's
name: one key must never serve two cosigner names (the spec's rule). A v1 cosignature says
"as of <timestamp>, the consistent tree head with the largest size I have observed for this
origin has this root hash".

This module is pure: it builds, parses and checks cosignatures; the witness that makes them
is ``ledger/witness/``, the log side that collects them ``veritrain/witnesses/push.py``.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

from attestation.errors import AttestationError, SignatureError
from attestation.keys import COSIGNATURE_V1_ALGORITHM, PublicKey, SigningKey
from ledger.errors import VerificationError
from ledger.note import SIGNATURE_PREFIX, NoteSignature, open_note

HEADER = "cosignature/v1"
"""First line of the signed message: domain separation from plain note signatures."""

MAX_TIMESTAMP = 2**63 - 1
"""tlog-cosignature: the timestamp MUST NOT exceed 2^63 - 1."""

_KEY_ID_SIZE = 4
_TIMESTAMP_SIZE = 8
_SIGNATURE_SIZE = 64


@dataclass(frozen=True)
class Cosignature:
    """One ``cosignature/v1`` signature, not yet verified against a key."""

    name: str
    """The cosigner's (witness's) key name."""
    key_id: bytes
    """4 bytes: SHA-256(name || 0x0A || 0x04 || public key)[:4]."""
    timestamp: int
    """POSIX seconds at which the witness cosigned."""
    signature: bytes
    """64-byte Ed25519 signature of :func:`signed_message`."""

    def __post_init__(self) -> None:
        if len(self.key_id) != _KEY_ID_SIZE:
            raise VerificationError(
                f"expected a {_KEY_ID_SIZE}-byte cosigner key id, got {len(self.key_id)} bytes"
            )
        if not 0 <= self.timestamp <= MAX_TIMESTAMP:
            raise VerificationError(
                f"expected a cosignature timestamp in [0, 2^63 - 1], got {self.timestamp}"
            )
        if len(self.signature) != _SIGNATURE_SIZE:
            raise VerificationError(
                f"expected a {_SIGNATURE_SIZE}-byte Ed25519 signature, got {len(self.signature)}"
            )

    def line(self) -> str:
        """The signature line, ending in a newline, as a witness returns it."""
        blob = self.key_id + self.timestamp.to_bytes(_TIMESTAMP_SIZE, "big") + self.signature
        return f"{SIGNATURE_PREFIX}{self.name} {base64.b64encode(blob).decode()}\n"

    @classmethod
    def from_note_signature(cls, signature: NoteSignature) -> Cosignature:
        """Read the timestamped signature out of a parsed signature line."""
        body = signature.signature
        if len(body) != _TIMESTAMP_SIZE + _SIGNATURE_SIZE:
            raise VerificationError(
                f"cosignature by {signature.name}: expected {_TIMESTAMP_SIZE} timestamp and "
                f"{_SIGNATURE_SIZE} signature bytes after the key id, got {len(body)} bytes"
            )
        return cls(
            name=signature.name,
            key_id=signature.key_id,
            timestamp=int.from_bytes(body[:_TIMESTAMP_SIZE], "big"),
            signature=body[_TIMESTAMP_SIZE:],
        )


@dataclass(frozen=True)
class VerifiedCosignature:
    """A cosignature that verified under ``key``."""

    key: PublicKey
    cosignature: Cosignature


def cosigner_key(vkey: str) -> PublicKey:
    """Parse a witness's C2SP verifier key (signature type 0x04)."""
    try:
        return PublicKey.from_vkey(vkey, signature_type=COSIGNATURE_V1_ALGORITHM)
    except AttestationError as exc:
        raise VerificationError(f"bad witness key {vkey!r}: {exc}") from None


def signed_message(checkpoint_text: str, timestamp: int) -> bytes:
    """tlog-cosignature "Ed25519 signed message": the header line, the time line, then the
    checkpoint's note text (with its final newline, without any signature line)."""
    if not checkpoint_text.endswith("\n"):
        raise VerificationError("checkpoint text must end with a newline")
    if not 0 <= timestamp <= MAX_TIMESTAMP:
        raise VerificationError(f"expected a timestamp in [0, 2^63 - 1], got {timestamp}")
    return f"{HEADER}\ntime {timestamp}\n{checkpoint_text}".encode()


def cosign(checkpoint_text: str, key: SigningKey, timestamp: int) -> Cosignature:
    """The cosignature of ``key`` (signature type 0x04) on a checkpoint's note text."""
    if key.signature_type != COSIGNATURE_V1_ALGORITHM:
        raise VerificationError(
            f"cannot cosign with {key.name!r}: expected a cosigner key (signature type 0x04), "
            f"got type 0x{key.signature_type:02x}"
        )
    return Cosignature(
        name=key.name,
        key_id=key.public.key_id,
        timestamp=timestamp,
        signature=key.sign(signed_message(checkpoint_text, timestamp)),
    )


def verify_cosignature(checkpoint_text: str, cosignature: Cosignature, key: PublicKey) -> None:
    """Return None if ``cosignature`` is ``key``'s cosignature of the checkpoint text; raise
    :class:`VerificationError` otherwise."""
    # 1. The key must be a cosigner key, and name and key id must both be its own.
    if key.signature_type != COSIGNATURE_V1_ALGORITHM:
        raise VerificationError(
            f"expected a cosigner key (signature type 0x04) for {key.name!r}, "
            f"got type 0x{key.signature_type:02x}"
        )
    if (cosignature.name, cosignature.key_id) != (key.name, key.key_id):
        raise VerificationError(
            f"cosignature is from another key: expected {key.name} ({key.key_id.hex()}), "
            f"got {cosignature.name} ({cosignature.key_id.hex()})"
        )
    # 2. The Ed25519 signature must cover the timestamped message.
    try:
        key.verify(cosignature.signature, signed_message(checkpoint_text, cosignature.timestamp))
    except SignatureError:
        raise VerificationError(
            f"cosignature by {key.name} (key id {key.key_id.hex()}) does not verify: the "
            "checkpoint text or the timestamp was altered, or the signature is corrupt"
        ) from None


def cosignatures_in(note: str, witness_keys: Sequence[PublicKey]) -> list[VerifiedCosignature]:
    """The cosignatures on the signed note ``note`` by ``witness_keys``, each verified, at
    most one per key (the newest).

    As C2SP signed-note asks: lines from other keys are ignored (the log's own signature
    among them); a line whose name and key id match a given key but which does not verify
    rejects the whole note."""
    text, signatures = open_note(note)
    known = {(key.name, key.key_id): key for key in witness_keys}
    found: dict[tuple[str, bytes], VerifiedCosignature] = {}
    for signature in signatures:
        key = known.get((signature.name, signature.key_id))
        if key is None:
            continue
        cosignature = Cosignature.from_note_signature(signature)
        verify_cosignature(text, cosignature, key)
        earlier = found.get((key.name, key.key_id))
        if earlier is None or earlier.cosignature.timestamp < cosignature.timestamp:
            found[(key.name, key.key_id)] = VerifiedCosignature(key=key, cosignature=cosignature)
    return list(found.values())


def parse_signature_lines(block: str) -> list[NoteSignature]:
    """Parse newline-terminated signature lines (a witness's add-checkpoint answer)."""
    if not block.endswith("\n"):
        raise VerificationError("expected signature lines ending in a newline")
    # A note of one dummy text line followed by the block reuses the note parser's checks.
    _, signatures = open_note("-\n\n" + block)
    return signatures
