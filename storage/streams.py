"""Byte streams: turning a caller's source into chunks, hashing them as they pass, spooling
them to a temporary file.

Every write path hashes the bytes itself while they stream (S3 ETags are not SHA-256, and a
caller's claimed digest is only trusted after we recomputed it), and never holds more than
one chunk of the source in memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeAlias, runtime_checkable

from storage.errors import IntegrityError

CHUNK_SIZE = 1 << 20
"""1 MiB: large enough that per-chunk overhead vanishes, small enough to never matter for memory."""


@runtime_checkable
class SupportsRead(Protocol):
    """A binary file-like object: ``read(n)`` returns at most n bytes, ``b""`` at the end."""

    def read(self, size: int = ..., /) -> bytes: ...


ByteSource: TypeAlias = SupportsRead | Iterable[bytes]
"""What ``ObjectStore.put`` accepts: a binary file-like object or an iterable of byte chunks."""


def iter_chunks(source: ByteSource, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """Yield the source's bytes as non-empty chunks of at most ``chunk_size`` bytes."""
    if isinstance(source, SupportsRead):
        while chunk := source.read(chunk_size):
            if not isinstance(chunk, bytes | bytearray | memoryview):
                raise TypeError(
                    f"expected a binary stream, got read() returning {type(chunk).__name__}"
                )
            yield bytes(chunk)
        return
    if isinstance(source, str | bytes | bytearray | memoryview):
        # A bare bytes object would iterate as ints; put_bytes is the way to store one.
        raise TypeError(
            f"expected a file-like object or an iterable of bytes, got {type(source).__name__}"
        )
    for chunk in source:
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise TypeError(f"expected byte chunks, got a {type(chunk).__name__}")
        with memoryview(chunk) as view:
            flat = view.cast("B")
            for offset in range(0, len(flat), chunk_size):
                yield flat[offset : offset + chunk_size].tobytes()


class Sha256Stream:
    """Counts and hashes the chunks that pass through :meth:`wrap`."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.size = 0

    def update(self, chunk: bytes) -> None:
        self._hash.update(chunk)
        self.size += len(chunk)

    def wrap(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            self.update(chunk)
            yield chunk

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def check_digest(actual: str, expected: str, what: str) -> None:
    """Raise :class:`IntegrityError` unless ``actual == expected``."""
    if actual != expected:
        raise IntegrityError(f"expected {what} to hash to sha256 {expected}, got {actual}")


def check_stored_size(digest: str, size: int, stored: int) -> None:
    """Raise :class:`IntegrityError` unless the object already stored under ``digest`` has
    the ``size`` of the bytes that hash to it. Finding the key taken is success for a
    content-addressed put -- same digest, same bytes -- unless the stored copy is damaged."""
    if stored != size:
        raise IntegrityError(
            f"expected the stored object sha256/{digest} to be {size} bytes, got {stored}: "
            f"the stored copy is damaged and, objects being write-once, must be repaired by hand"
        )


def drain(chunks: Iterable[bytes]) -> tuple[str, int]:
    """Consume the chunks, returning their SHA-256 (hex) and total size."""
    hasher = Sha256Stream()
    for chunk in chunks:
        hasher.update(chunk)
    return hasher.hexdigest(), hasher.size


def file_sha256(path: str | os.PathLike[str]) -> tuple[str, int]:
    """SHA-256 (hex) and size of a file, read in chunks."""
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
        return digest, f.tell()


@dataclass(frozen=True)
class Spooled:
    """A temporary file holding a source's bytes, with their digest and size."""

    path: Path
    digest: str
    size: int


@contextlib.contextmanager
def spooled(chunks: Iterable[bytes], directory: Path, *, durable: bool) -> Iterator[Spooled]:
    """Write the chunks to a new temporary file in ``directory`` while hashing them; the file
    is removed when the block exits (a caller that wants to keep the bytes links or uploads
    them inside the block). ``durable`` fsyncs the data before the block is entered."""
    fd, name = tempfile.mkstemp(dir=directory, prefix="put-", suffix=".part")
    path = Path(name)
    try:
        hasher = Sha256Stream()
        with os.fdopen(fd, "wb") as f:
            for chunk in hasher.wrap(chunks):
                f.write(chunk)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        yield Spooled(path=path, digest=hasher.hexdigest(), size=hasher.size)
    finally:
        path.unlink(missing_ok=True)
