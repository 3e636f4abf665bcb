"""The storage package's error hierarchy."""

from __future__ import annotations


class StorageError(Exception):
    """Base of every error raised by ``storage``."""


class ObjectNotFoundError(StorageError):
    """No object is stored under the digest."""


class IntegrityError(StorageError):
    """Bytes read back do not hash to the digest they are stored under (corruption or tampering)."""
