"""The local-folder back-end: one file per object under ``<root>/sha256/<hex>``.

Atomicity and write-once: bytes are written to a temporary file in ``<root>/.tmp`` (same file
system as the objects, so no copy is needed), fsynced, made read-only, and then published
with link(2), which -- unlike rename(2) -- fails instead of replacing an existing name. The
directory is fsynced so the new name survives a crash. A reader therefore sees either no
object or the complete one, and two writers racing on the same digest cannot overwrite each
other. A crash can leave a stray file in ``.tmp`` (never a partial object); it is safe to
delete ``.tmp/*.part`` files older than any running write.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from storage.base import ObjectStore
from storage.errors import InvalidRangeError, ObjectExistsError, ObjectNotFoundError
from storage.layout import DIGEST_ALGORITHM, object_relpath, validate_digest
from storage.reader import ObjectReader
from storage.streams import CHUNK_SIZE, check_digest, check_stored_size, drain, spooled

_READ_ONLY = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH


def publish_once(source: Path, target: Path) -> None:
    """Give the fully written file ``source`` the name ``target`` unless ``target`` exists
    (:class:`ObjectExistsError`); ``source`` keeps its name too, the caller removes it.

    link(2) is atomic and never replaces an existing name (POSIX.1-2017 link(): "shall fail
    if ... path2 ... exists"), which rename(2) would do silently.
    """
    os.chmod(source, _READ_ONLY)
    try:
        os.link(source, target)
    except FileExistsError as exc:
        raise ObjectExistsError(
            f"expected no object at {target}, found one (objects are write-once)"
        ) from exc
    _fsync_directory(target.parent)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStore(ObjectStore):
    """Objects as read-only files under ``root`` (created if missing)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()
        self.url = f"file://{self.root}"
        self._tmp = self.root / ".tmp"
        (self.root / DIGEST_ALGORITHM).mkdir(parents=True, exist_ok=True)
        self._tmp.mkdir(exist_ok=True)

    def path_for(self, digest: str) -> Path:
        """Where the object for ``digest`` is (or would be) stored; the digest is validated."""
        return self.root / object_relpath(digest)

    # --- ObjectStore --------------------------------------------------------------------

    def exists(self, digest: str) -> bool:
        return self.path_for(digest).is_file()

    def size(self, digest: str) -> int:
        try:
            return self.path_for(digest).stat().st_size
        except FileNotFoundError as exc:
            raise self._not_found(digest) from exc

    def local_path(self, digest: str) -> Path:
        path = self.path_for(digest)
        if not path.is_file():
            raise self._not_found(digest)
        return path

    def presigned_url(self, digest: str, expires_s: int = 3600) -> None:
        validate_digest(digest)
        return None

    def _put_chunks(self, chunks: Iterator[bytes], expected_sha256: str | None) -> str:
        if expected_sha256 is not None and self.exists(expected_sha256):
            # Already stored: only check the caller's bytes, without writing them again.
            digest, size = drain(chunks)
            check_digest(digest, expected_sha256, "the stream")
            check_stored_size(digest, size, self.size(digest))
            return digest
        with spooled(chunks, self._tmp, durable=True) as spool:
            if expected_sha256 is not None:
                check_digest(spool.digest, expected_sha256, "the stream")
            target = self.path_for(spool.digest)
            try:
                publish_once(spool.path, target)
            except ObjectExistsError:
                check_stored_size(spool.digest, spool.size, self.size(spool.digest))
        return spool.digest

    def _open_range(self, digest: str, start: int, end: int | None) -> ObjectReader:
        try:
            f = open(self.path_for(digest), "rb")  # noqa: SIM115 - closed by the reader
        except FileNotFoundError as exc:
            raise self._not_found(digest) from exc
        object_size = os.fstat(f.fileno()).st_size
        if start > object_size:
            f.close()
            raise InvalidRangeError(
                f"expected start <= {object_size} (the size of sha256/{digest}), got {start}"
            )
        stop = object_size if end is None else min(end, object_size)
        f.seek(start)
        return ObjectReader(
            _read_chunks(f, stop - start),
            digest=digest,
            start=start,
            end=stop,
            object_size=object_size,
            release=f.close,
        )

    def _not_found(self, digest: str) -> ObjectNotFoundError:
        return ObjectNotFoundError(f"no object sha256/{digest} in {self.url}")


def _read_chunks(f: BinaryIO, length: int) -> Iterator[bytes]:
    remaining = length
    while remaining > 0:
        chunk = f.read(min(CHUNK_SIZE, remaining))
        if not chunk:
            return  # truncated on disk; the reader reports the short length
        remaining -= len(chunk)
        yield chunk
