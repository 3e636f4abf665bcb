"""Canonical JSON (RFC 8785, JSON Canonicalization Scheme) and the digests taken over it.

Everything veritrain signs or hashes as JSON goes through :func:`canonical_json`, so two
honest parties serialise the same value to the same bytes. RFC 8785 §3.2.2.3 restricts
numbers to IEEE-754 doubles: integers beyond 2**53 and NaN/Infinity are refused, so callers
keep large counters as strings and never record non-finite metrics as numbers.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785

from attestation.errors import AttestationError


class CanonicalizationError(AttestationError):
    """A value cannot be written as RFC 8785 canonical JSON."""


def canonical_json(value: Any) -> bytes:
    """Serialise ``value`` as RFC 8785 canonical JSON (UTF-8 bytes)."""
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise CanonicalizationError(f"cannot canonicalise value: {exc}") from exc


def parse_canonical_json(data: bytes) -> Any:
    """Parse JSON and insist that ``data`` is already in canonical form.

    A verifier that accepted non-canonical bytes would let two different byte strings
    (and so two different hashes) stand for the same record.
    """
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CanonicalizationError(f"not valid JSON: {exc}") from exc
    if canonical_json(value) != data:
        raise CanonicalizationError("JSON is valid but not in RFC 8785 canonical form")
    return value


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_digest(value: Any) -> str:
    """Hex SHA-256 of the canonical JSON of ``value``."""
    return sha256_hex(canonical_json(value))
