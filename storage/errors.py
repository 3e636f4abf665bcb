"""The storage package's error hierarchy: callers catch :class:`StorageError`.

The web layer maps these to HTTP statuses in one handler (not found -> 404, invalid digest
-> 400, invalid range -> 416, integrity -> 500/502); the CLI turns any of them into one line.
Every message says what was expected and what was found.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base of every error raised by ``storage``."""


class ObjectNotFoundError(StorageError):
    """No object is stored under the digest."""


class IntegrityError(StorageError):
    """Bytes read back do not hash to the digest they are stored under (corruption or tampering)."""


class InvalidDigestError(StorageError, ValueError):
    """A digest is not 64 lowercase hex characters, so no key or path may be built from it."""


class InvalidRangeError(StorageError, ValueError):
    """A byte range is negative, reversed, or starts past the end of the object."""


class ObjectExistsError(StorageError):
    """A write-once key already holds an object; the low-level writers refuse to replace it."""


class ObjectTooLargeError(StorageError):
    """An object is larger than the caller's limit for reading it into memory."""


class StoreURLError(StorageError, ValueError):
    """A store URL is neither ``file://<path>`` nor ``s3://<bucket>[/<prefix>]``."""


class CheckpointError(StorageError):
    """Checkpoint files, names, index or manifest are malformed or do not match each other."""
