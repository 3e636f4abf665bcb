"""C2SP signed notes (https://c2sp.org/signed-note), Ed25519 signatures only.

A note is UTF-8 text ending in a newline, a blank line, then one or more signature lines
``— <key name> base64(key id || signature)``. The signature covers the text including its
final newline but not the blank line. Keys, key ids and key strings come from
``attestation.keys``.

Verification follows the spec's rules: signatures from unknown keys (name *and* key id not
both matching a given key) are ignored; a signature from a known key that does not verify
rejects the whole note; a note with no verified signature from a known key is rejected.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass

from attestation.errors import AttestationError, SignatureError
from attestation.keys import ED25519_ALGORITHM, PublicKey, SigningKey
from ledger.errors import VerificationError

SIGNATURE_PREFIX = "\u2014 "
"""Em dash (U+2014) and a space open every signature line."""

MAX_SIGNATURES = 100
"""The spec asks verifiers to accept at least 16 signatures and to bound the count."""

_KEY_ID_SIZE = 4


@dataclass(frozen=True)
class NoteSignature:
    """One signature line of a note, not yet verified."""

    name: str
    key_id: bytes
    signature: bytes

    def line(self) -> str:
        """The signature line, ending in a newline."""
        blob = base64.b64encode(self.key_id + self.signature).decode()
        return f"{SIGNATURE_PREFIX}{self.name} {blob}\n"


def sign_note(text: str, skey: str) -> str:
    """Sign ``text`` (which must end with a newline) with the C2SP signer key ``skey``;
    return the whole note."""
    try:
        key = SigningKey.from_skey(skey)
    except AttestationError as exc:
        raise VerificationError(f"cannot sign: bad signer key: {exc}") from None
    return sign_note_with(text, key)


def sign_note_with(text: str, key: SigningKey) -> str:
    """:func:`sign_note` with an already-parsed signing key."""
    if key.signature_type != ED25519_ALGORITHM:
        raise VerificationError(
            f"cannot sign a note with {key.name!r}: it is a cosigner key (signature type "
            f"0x{key.signature_type:02x}), which signs only cosignatures (ledger/cosignature.py)"
        )
    _check_text(text)
    signature = key.sign(text.encode())
    blob = base64.b64encode(key.public.key_id + signature).decode()
    return f"{text}\n{SIGNATURE_PREFIX}{key.name} {blob}\n"


def verify_note(note: str, vkeys: Sequence[str]) -> str:
    """Return the text of ``note`` if a key among the C2SP verifier keys ``vkeys`` signed it;
    raise :class:`VerificationError` otherwise."""
    # 1. The verifier keys, indexed by (name, key id): the tuple names a key uniquely.
    known = _parse_vkeys(vkeys)
    # 2. Split the note into text and signature lines.
    text, signatures = open_note(note)
    # 3. Verify every signature from a known key; one bad signature rejects the note.
    verified = 0
    for sig in signatures:
        key = known.get((sig.name, sig.key_id))
        if key is None:
            continue  # C2SP: unknown keys are ignored, even if name or id alone match
        try:
            key.verify(sig.signature, text.encode())
        except SignatureError:
            raise VerificationError(
                f"signature by {sig.name} (key id {sig.key_id.hex()}) does not verify: "
                "the note text was altered or the signature is corrupt"
            ) from None
        verified += 1
    # 4. At least one known key must have signed.
    if not verified:
        expected = ", ".join(f"{name} ({kid.hex()})" for name, kid in known)
        found = ", ".join(f"{s.name} ({s.key_id.hex()})" for s in signatures)
        raise VerificationError(
            f"no signature from a known key: expected one of {expected}, got {found}"
        )
    return text


def open_note(note: str) -> tuple[str, list[NoteSignature]]:
    """Split a signed note into its text and (unverified) signatures, checking the format.

    The text must never be trusted before :func:`verify_note` accepts it."""
    if not note.endswith("\n"):
        raise VerificationError("malformed note: expected it to end with a newline, got none")
    _check_characters(note)
    # The text is separated from the signatures by the note's last blank line.
    split = note.rfind("\n\n")
    if split < 0:
        raise VerificationError("malformed note: expected a blank line before the signatures")
    text, block = note[: split + 1], note[split + 2 :]
    lines = block.split("\n")[:-1]  # block ends with "\n"
    if not lines:
        raise VerificationError("malformed note: expected at least one signature line, got none")
    if len(lines) > MAX_SIGNATURES:
        raise VerificationError(
            f"note has too many signatures: expected at most {MAX_SIGNATURES}, got {len(lines)}"
        )
    return text, [_parse_signature_line(line) for line in lines]


def _parse_signature_line(line: str) -> NoteSignature:
    if not line.startswith(SIGNATURE_PREFIX):
        raise VerificationError(
            "malformed signature line: expected "
            f"'{SIGNATURE_PREFIX}<name> <signature>', got {line!r}"
        )
    name, sep, blob = line[len(SIGNATURE_PREFIX) :].partition(" ")
    if not sep or not name or " " in blob:
        raise VerificationError(
            f"malformed signature line: expected a name and a signature, got {line!r}"
        )
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise VerificationError(
            f"malformed signature line: signature is not base64 in {line!r}"
        ) from None
    if len(raw) <= _KEY_ID_SIZE:
        raise VerificationError(
            f"malformed signature line: expected a key id and a signature, got {len(raw)} bytes"
        )
    return NoteSignature(name=name, key_id=raw[:_KEY_ID_SIZE], signature=raw[_KEY_ID_SIZE:])


def _parse_vkeys(vkeys: Sequence[str]) -> dict[tuple[str, bytes], PublicKey]:
    if not vkeys:
        raise VerificationError("expected at least one verifier key, got none")
    known: dict[tuple[str, bytes], PublicKey] = {}
    for vkey in vkeys:
        try:
            key = PublicKey.from_vkey(vkey)
        except AttestationError as exc:
            raise VerificationError(f"bad verifier key {vkey!r}: {exc}") from None
        known[(key.name, key.key_id)] = key
    return known


def _check_text(text: str) -> None:
    if not text.endswith("\n"):
        raise VerificationError("note text must end with a newline")
    _check_characters(text)


def _check_characters(value: str) -> None:
    # C2SP: notes are UTF-8 with no ASCII control characters other than newline.
    for ch in value:
        if ch < " " and ch != "\n":
            raise VerificationError(
                f"malformed note: control character U+{ord(ch):04X} is not allowed"
            )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise VerificationError("malformed note: expected valid UTF-8 text") from None
