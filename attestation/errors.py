"""The attestation package's error hierarchy: callers catch :class:`AttestationError`."""

from __future__ import annotations


class AttestationError(Exception):
    """Base of every error raised by ``attestation``."""


class KeyFormatError(AttestationError):
    """A key string or key file is malformed (wrong prefix, name, length or key id)."""


class VerificationError(AttestationError):
    """A signature, envelope, statement or quote does not verify. The message says what was
    expected and what was found."""


class SignatureError(VerificationError):
    """An Ed25519 signature does not verify under the given public key."""
