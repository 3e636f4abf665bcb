"""Strict reading of decoded JSON objects for the attestation formats.

Quotes, endorsements, event logs and contributions are canonical JSON with an exact set of
fields: anything missing, extra, of the wrong type or in a non-canonical spelling (upper-case
hex, unpadded base64) is a :class:`ParseError`. Strictness is what lets a signature over the
re-serialised fields stand for the bytes that were received: parse -> serialise is the
identity on every accepted input.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Set
from datetime import UTC, datetime
from typing import Any

from attestation.canonical import CanonicalizationError, parse_canonical_json
from attestation.errors import ParseError

_HEX = re.compile(r"[0-9a-f]*")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # RFC 3339, UTC, whole seconds


def load_object(data: bytes, *, what: str) -> dict[str, Any]:
    """Parse canonical JSON that must be an object."""
    try:
        value = parse_canonical_json(data)
    except CanonicalizationError as exc:
        raise ParseError(f"{what}: {exc}") from None
    return as_object(value, what=what)


def as_object(value: Any, *, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ParseError(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def require_fields(
    obj: Mapping[str, Any], *, required: Set[str], optional: Set[str] = frozenset(), what: str
) -> None:
    """Exactly ``required`` (plus any of ``optional``) must be present."""
    missing = sorted(required - obj.keys())
    if missing:
        raise ParseError(f"{what}: missing field(s) {', '.join(missing)}")
    extra = sorted(obj.keys() - required - optional)
    if extra:
        raise ParseError(f"{what}: unexpected field(s) {', '.join(extra)}")


def read_str(obj: Mapping[str, Any], key: str, *, what: str) -> str:
    value = obj[key]
    if not isinstance(value, str):
        raise ParseError(f"{what}.{key}: expected a string, got {type(value).__name__}")
    return value


def read_int(obj: Mapping[str, Any], key: str, *, what: str, minimum: int = 0) -> int:
    value = obj[key]
    # bool is an int subclass in Python; JSON true must not pass as 1.
    if not isinstance(value, int) or isinstance(value, bool):
        raise ParseError(f"{what}.{key}: expected an integer, got {type(value).__name__}")
    if value < minimum:
        raise ParseError(f"{what}.{key}: expected an integer >= {minimum}, got {value}")
    return value


def read_bool(obj: Mapping[str, Any], key: str, *, what: str) -> bool:
    value = obj[key]
    if not isinstance(value, bool):
        raise ParseError(f"{what}.{key}: expected true or false, got {type(value).__name__}")
    return value


def read_list(obj: Mapping[str, Any], key: str, *, what: str) -> list[Any]:
    value = obj[key]
    if not isinstance(value, list):
        raise ParseError(f"{what}.{key}: expected a JSON array, got {type(value).__name__}")
    return value


def read_hex(obj: Mapping[str, Any], key: str, *, what: str, sizes: Set[int]) -> bytes:
    """Lower-case hex whose decoded length (in bytes) is one of ``sizes``."""
    return as_hex(obj[key], what=f"{what}.{key}", sizes=sizes)


def as_hex(value: Any, *, what: str, sizes: Set[int]) -> bytes:
    if not isinstance(value, str):
        raise ParseError(f"{what}: expected a hex string, got {type(value).__name__}")
    if _HEX.fullmatch(value) is None or len(value) % 2:
        raise ParseError(f"{what}: expected lower-case hex, got {value[:80]!r}")
    if len(value) // 2 not in sizes:
        raise ParseError(f"{what}: expected {_describe_sizes(sizes)} bytes, got {len(value) // 2}")
    return bytes.fromhex(value)


def _describe_sizes(sizes: Set[int]) -> str:
    ordered = sorted(sizes)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}..{ordered[-1]}"
    if len(ordered) == 1:
        return str(ordered[0])
    return ", ".join(str(n) for n in ordered[:-1]) + f" or {ordered[-1]}"


def check_sha256_hex(value: str, name: str) -> None:
    """Raise ValueError unless ``value`` is a hex SHA-256 digest (64 lower-case digits)."""
    if _SHA256_HEX.fullmatch(value) is None:
        raise ValueError(f"{name}: expected 64 lower-case hex digits, got {value!r}")


def read_base64(obj: Mapping[str, Any], key: str, *, what: str) -> bytes:
    """Standard, padded base64 exactly as :func:`encode_base64` writes it."""
    text = read_str(obj, key, what=what)
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ParseError(f"{what}.{key}: expected standard base64, got {text[:80]!r}") from None
    if encode_base64(data) != text:
        raise ParseError(f"{what}.{key}: expected canonical padded base64, got {text[:80]!r}")
    return data


def encode_base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def read_timestamp(obj: Mapping[str, Any], key: str, *, what: str) -> datetime:
    text = read_str(obj, key, what=what)
    try:
        value = datetime.strptime(text, _TIMESTAMP_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise ParseError(
            f"{what}.{key}: expected an RFC 3339 UTC time like 2025-01-31T12:00:00Z, got {text!r}"
        ) from None
    if format_timestamp(value) != text:
        raise ParseError(f"{what}.{key}: expected a canonical timestamp, got {text!r}")
    return value


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with whole seconds; ``value`` must carry a time zone."""
    if value.tzinfo is None:
        raise ValueError(f"expected a timezone-aware datetime, got naive {value.isoformat()}")
    return value.astimezone(UTC).strftime(_TIMESTAMP_FORMAT)
