"""Where objects live: the one place that turns a digest into a key or a relative path.

Objects are content-addressed (DESIGN.md §4): the SHA-256 of an object's bytes, written as
64 lowercase hex characters, names it, and its key is ``sha256/<hex>`` under the store's
prefix. Digests are validated *before* any key or path is built, so user input (a URL path
segment, a manifest entry) can never address anything outside the store's folder or prefix.

Pure functions only: no I/O, no back-end knowledge.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from storage.errors import InvalidDigestError, StoreURLError

DIGEST_ALGORITHM = "sha256"
"""The only digest algorithm objects are addressed by."""

_DIGEST = re.compile(r"[0-9a-f]{64}")


def validate_digest(digest: str) -> str:
    """Return ``digest`` unchanged if it is 64 lowercase hex characters, else raise
    :class:`InvalidDigestError`. Uppercase is refused rather than folded so that one object
    has exactly one spelling (and one key)."""
    if not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None:
        raise InvalidDigestError(
            f"expected a SHA-256 digest as 64 lowercase hex characters, got {digest!r:.80}"
        )
    return digest


def object_relpath(digest: str) -> PurePosixPath:
    """``sha256/<hex>``: the object's path relative to the store's root or prefix."""
    return PurePosixPath(DIGEST_ALGORITHM, validate_digest(digest))


def object_key(prefix: str, digest: str) -> str:
    """The S3 key of an object: ``<prefix>/sha256/<hex>``, or ``sha256/<hex>`` with no prefix."""
    relpath = object_relpath(digest).as_posix()
    return f"{prefix}/{relpath}" if prefix else relpath


def normalize_prefix(prefix: str) -> str:
    """A key prefix without leading/trailing slashes; refuses empty or dot segments, which
    S3 accepts as keys but which would make one object reachable under several names."""
    parts = [part for part in prefix.split("/") if part]
    if any(part in (".", "..") for part in parts):
        raise StoreURLError(f"expected a key prefix without '.' or '..' segments, got {prefix!r}")
    return "/".join(parts)
