"""Ed25519 keys with C2SP signed-note names, key ids and key strings.

One key type serves the log (signed tree heads), the attester, the platform root and the
clusters, so every public key veritrain publishes can be written the same way.

C2SP signed-note (https://c2sp.org/signed-note), Ed25519 keys:
  key id     = SHA-256(name || 0x0A || 0x01 || public key)[:4]
  verifier   = name "+" hex(key id) "+" base64(0x01 || public key)
  signer     = "PRIVATE+KEY+" name "+" hex(key id) "+" base64(0x01 || seed)

Witnesses sign with the same Ed25519 keys under another signature type, 0x04 (timestamped
``cosignature/v1``, C2SP tlog-cosignature), which enters the key id and the vkey in place of
0x01. A key string of one type is refused where the other is expected: a cosigner key must
never verify plain note signatures, nor a log key cosignatures.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from attestation.errors import KeyFormatError, SignatureError

ED25519_ALGORITHM = 0x01
"""Signature-type byte of Ed25519 in C2SP signed-note."""

COSIGNATURE_V1_ALGORITHM = 0x04
"""Signature-type byte of timestamped Ed25519 checkpoint cosignatures (C2SP signed-note,
"Signature types"; the message is defined by C2SP tlog-cosignature)."""

_SIGNATURE_TYPES = {
    ED25519_ALGORITHM: "Ed25519",
    COSIGNATURE_V1_ALGORITHM: "Ed25519 cosignature/v1",
}

_PRIVATE_PREFIX = "PRIVATE+KEY+"


def check_key_name(name: str) -> None:
    """C2SP signed-note: a key name is non-empty and holds no whitespace or '+'."""
    if not name or any(c.isspace() or c == "+" for c in name):
        raise KeyFormatError(f"key name must be non-empty with no spaces or '+', got {name!r}")


def note_key_id(name: str, public_key: bytes, signature_type: int = ED25519_ALGORITHM) -> bytes:
    """The 4-byte C2SP key id of an Ed25519 key used with ``signature_type``."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([signature_type]) + public_key).digest()[:4]


def _check_signature_type(signature_type: int) -> None:
    if signature_type not in _SIGNATURE_TYPES:
        raise KeyFormatError(f"expected signature type 0x01 or 0x04, got 0x{signature_type:02x}")


@dataclass(frozen=True)
class PublicKey:
    """A named Ed25519 verification key."""

    name: str
    raw: bytes
    signature_type: int = ED25519_ALGORITHM
    """0x01 for note signatures (logs, attesters, ...), 0x04 for witness cosignatures."""
    _key: Ed25519PublicKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_key_name(self.name)
        _check_signature_type(self.signature_type)
        if len(self.raw) != 32:
            raise KeyFormatError(f"Ed25519 public key must be 32 bytes, got {len(self.raw)}")
        object.__setattr__(self, "_key", Ed25519PublicKey.from_public_bytes(self.raw))

    @property
    def key_id(self) -> bytes:
        return note_key_id(self.name, self.raw, self.signature_type)

    @property
    def vkey(self) -> str:
        """The C2SP verifier key string."""
        blob = base64.b64encode(bytes([self.signature_type]) + self.raw).decode()
        return f"{self.name}+{self.key_id.hex()}+{blob}"

    @property
    def fingerprint(self) -> str:
        """Hex SHA-256 of the raw public key; used as the DSSE ``keyid``."""
        return hashlib.sha256(self.raw).hexdigest()

    def verify(self, signature: bytes, message: bytes) -> None:
        """Return None if ``signature`` is this key's Ed25519 signature of ``message``."""
        try:
            self._key.verify(signature, message)
        except InvalidSignature:
            raise SignatureError(f"signature does not verify under key {self.name!r}") from None

    @classmethod
    def from_vkey(cls, vkey: str, *, signature_type: int = ED25519_ALGORITHM) -> PublicKey:
        """Parse a C2SP verifier key string of ``signature_type``; the embedded key id must
        match."""
        parts = vkey.strip().split("+", 2)  # base64 may itself contain "+"
        if len(parts) != 3:
            raise KeyFormatError(f"expected name+keyid+base64 key, got {vkey!r}")
        name, key_id_hex, blob = parts
        raw = _decode_key_blob(blob, what="verifier key", signature_type=signature_type)
        key = cls(name=name, raw=raw, signature_type=signature_type)
        if key_id_hex != key.key_id.hex():
            raise KeyFormatError(
                f"verifier key id mismatch: expected {key.key_id.hex()}, got {key_id_hex}"
            )
        return key


@dataclass(frozen=True)
class SigningKey:
    """A named Ed25519 signing key (the 32-byte seed)."""

    name: str
    seed: bytes = field(repr=False)
    signature_type: int = ED25519_ALGORITHM
    """0x01 for note signatures, 0x04 for a witness's cosignatures."""
    _key: Ed25519PrivateKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_key_name(self.name)
        _check_signature_type(self.signature_type)
        if len(self.seed) != 32:
            raise KeyFormatError(f"Ed25519 seed must be 32 bytes, got {len(self.seed)}")
        object.__setattr__(self, "_key", Ed25519PrivateKey.from_private_bytes(self.seed))

    @classmethod
    def generate(cls, name: str, *, signature_type: int = ED25519_ALGORITHM) -> SigningKey:
        return cls(name=name, seed=os.urandom(32), signature_type=signature_type)

    @property
    def public(self) -> PublicKey:
        raw = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return PublicKey(name=self.name, raw=raw, signature_type=self.signature_type)

    @property
    def skey(self) -> str:
        """The C2SP signer key string (secret)."""
        blob = base64.b64encode(bytes([self.signature_type]) + self.seed).decode()
        return f"{_PRIVATE_PREFIX}{self.name}+{self.public.key_id.hex()}+{blob}"

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)

    @classmethod
    def from_skey(cls, skey: str, *, signature_type: int = ED25519_ALGORITHM) -> SigningKey:
        text = skey.strip()
        if not text.startswith(_PRIVATE_PREFIX):
            raise KeyFormatError("signer key must start with 'PRIVATE+KEY+'")
        parts = text[len(_PRIVATE_PREFIX) :].split("+", 2)
        if len(parts) != 3:
            raise KeyFormatError("expected PRIVATE+KEY+name+keyid+base64 signer key")
        name, key_id_hex, blob = parts
        seed = _decode_key_blob(blob, what="signer key", signature_type=signature_type)
        key = cls(name=name, seed=seed, signature_type=signature_type)
        if key_id_hex != key.public.key_id.hex():
            raise KeyFormatError(
                f"signer key id mismatch: expected {key.public.key_id.hex()}, got {key_id_hex}"
            )
        return key

    def save(self, path: Path) -> None:
        """Write the signer key string to ``path`` with mode 0600, atomically, never overwriting."""
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(self.skey + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.link(tmp, path)  # fails if the key already exists: keys are never replaced silently
        finally:
            tmp.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: Path, *, signature_type: int = ED25519_ALGORITHM) -> SigningKey:
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            raise KeyFormatError(
                f"{path}: private key is readable by others (mode {mode:o}); run chmod 600 {path}"
            )
        return cls.from_skey(path.read_text(), signature_type=signature_type)


def load_or_create(path: Path, name: str) -> SigningKey:
    """Load the key at ``path``, creating it on first use. The stored name must equal ``name``."""
    if path.exists():
        key = SigningKey.load(path)
        if key.name != name:
            raise KeyFormatError(f"{path}: expected a key named {name!r}, got {key.name!r}")
        return key
    key = SigningKey.generate(name)
    try:
        key.save(path)
    except FileExistsError:  # another process created it first; use theirs
        return SigningKey.load(path)
    return key


def _decode_key_blob(blob: str, *, what: str, signature_type: int) -> bytes:
    _check_signature_type(signature_type)
    try:
        data = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise KeyFormatError(f"{what}: key material is not valid base64") from None
    if len(data) == 33 and data[0] != signature_type and data[0] in _SIGNATURE_TYPES:
        raise KeyFormatError(
            f"{what}: expected signature type 0x{signature_type:02x} "
            f"({_SIGNATURE_TYPES[signature_type]}), got 0x{data[0]:02x} "
            f"({_SIGNATURE_TYPES[data[0]]})"
        )
    if len(data) != 33 or data[0] != signature_type:
        raise KeyFormatError(
            f"{what}: expected 0x{signature_type:02x} followed by 32 bytes of Ed25519 key"
        )
    return data[1:]
