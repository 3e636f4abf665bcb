"""The object-store interface every back-end implements.

Objects are immutable and content-addressed (DESIGN.md §4): ``put`` computes the SHA-256 of
the bytes while they stream and stores them under ``sha256/<hex>``; the same bytes always
land on the same key, so a second ``put`` of them is a no-op. Keys are write-once: nothing
in this interface can replace the bytes under a digest.

Back-ends implement two primitives, ``_put_chunks`` (store a stream, write-once, verifying
the digest the caller expects before the object becomes visible) and ``_open_range``, plus
the small queries; the conveniences (``put_bytes``, ``put_file``, ``read_bytes``,
``verify``) are written once here on top of them.
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path

from storage.closing import Closing
from storage.errors import InvalidRangeError, ObjectTooLargeError
from storage.layout import validate_digest
from storage.reader import ObjectReader
from storage.streams import ByteSource, file_sha256, iter_chunks


class ObjectStore(Closing, ABC):
    """A content-addressed, write-once store of byte objects."""

    url: str
    """Where the store lives, as ``file://...`` or ``s3://bucket/prefix``."""

    # --- writing ------------------------------------------------------------------------

    def put(self, source: ByteSource, *, expected_sha256: str | None = None) -> str:
        """Store the bytes of ``source`` (a binary file-like object or an iterable of byte
        chunks) and return their SHA-256 as 64 lowercase hex characters.

        With ``expected_sha256`` the bytes stream straight to their final key and the object
        only becomes visible if they hash to it (else :class:`IntegrityError`, and nothing is
        stored). Without it they are first spooled to a local temporary file while hashing,
        since the key is unknown until the stream ends.
        """
        if expected_sha256 is not None:
            validate_digest(expected_sha256)
        return self._put_chunks(iter_chunks(source), expected_sha256)

    def put_bytes(self, data: bytes) -> str:
        """Store ``data``; return its SHA-256 (hex)."""
        return self._put_chunks(iter_chunks([data]), hashlib.sha256(data).hexdigest())

    def put_file(self, path: str | os.PathLike[str]) -> str:
        """Store a file's bytes; return their SHA-256 (hex). The file is hashed first and then
        streamed to its key, so it is read twice but never copied; if it changes in between,
        the upload fails with :class:`IntegrityError`."""
        digest, _ = file_sha256(path)
        with open(path, "rb") as f:
            return self._put_chunks(iter_chunks(f), digest)

    # --- reading ------------------------------------------------------------------------

    def open(self, digest: str, start: int | None = None, end: int | None = None) -> ObjectReader:
        """The bytes ``[start, end)`` of an object (Python slice semantics: ``end`` is
        exclusive and is clamped to the object's size; ``None`` means from the beginning /
        to the end). A read covering the whole object is verified against ``digest`` as it
        streams; a partial range is only checked for length (see :mod:`storage.reader`).

        Raises :class:`ObjectNotFoundError`, or :class:`InvalidRangeError` for a negative or
        reversed range or a ``start`` past the end of the object.
        """
        validate_digest(digest)
        first = 0 if start is None else start
        if first < 0 or (end is not None and end < first):
            raise InvalidRangeError(
                f"expected 0 <= start <= end, got start={start}, end={end} for sha256/{digest}"
            )
        return self._open_range(digest, first, end)

    def read_bytes(self, digest: str, max_size: int) -> bytes:
        """The whole object, verified, if it is at most ``max_size`` bytes; else
        :class:`ObjectTooLargeError` before anything is read."""
        size = self.size(digest)
        if size > max_size:
            raise ObjectTooLargeError(
                f"expected sha256/{digest} to be at most {max_size} bytes, got {size}"
            )
        with self.open(digest) as reader:
            return reader.read()

    def verify(self, digest: str) -> None:
        """Read the whole object and return None if it hashes to ``digest``; else raise
        :class:`IntegrityError` (or :class:`ObjectNotFoundError`)."""
        with self.open(digest) as reader:
            for _ in reader:
                pass

    # --- queries ------------------------------------------------------------------------

    @abstractmethod
    def exists(self, digest: str) -> bool:
        """Whether an object is stored under ``digest``."""

    @abstractmethod
    def size(self, digest: str) -> int:
        """The object's size in bytes; :class:`ObjectNotFoundError` if there is none."""

    @abstractmethod
    def local_path(self, digest: str) -> Path | None:
        """The object's file on this machine when the back-end is a local folder (so a web
        server can send it with Range support); None for remote back-ends. Serving the file
        directly skips digest verification."""

    @abstractmethod
    def presigned_url(self, digest: str, expires_s: int = 3600) -> str | None:
        """A time-limited URL that fetches the object without credentials, or None when the
        back-end has no such thing. Existence is not checked, and whoever fetches the URL
        must verify the digest themselves (the key names it)."""

    def close(self) -> None:
        """Release clients and connections (none here; remote back-ends close their clients)."""

    # --- back-end primitives --------------------------------------------------------------

    @abstractmethod
    def _put_chunks(self, chunks: Iterator[bytes], expected_sha256: str | None) -> str:
        """Store the chunks write-once under their digest and return it. With
        ``expected_sha256`` the object must not become visible unless the chunks hash to it.
        If the key already holds an object, succeed only if its size matches."""

    @abstractmethod
    def _open_range(self, digest: str, start: int, end: int | None) -> ObjectReader:
        """Open ``[start, min(end, size))`` of a validated digest; ``start >= 0`` and
        ``end >= start`` are already checked."""
