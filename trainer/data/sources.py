"""Corpus sources: where the training text comes from, with digests and licences.

The default corpus is one every machine with Python already has: the standard library's own
``.py`` sources (licence PSF-2.0). The subset is deterministic -- the top-level ``*.py`` files
of the stdlib folder, in sorted file-name order, taken while their running total stays within
a byte budget -- so the same Python version yields the same corpus (and the same digests) on
every machine. The Python version is recorded next to the sources because another version has
other files.

Local files are found by name (folders are searched recursively, in sorted path order):
text (``.txt .py .md .rst .text``, one document per file), JSON Lines (``.jsonl``, or
gzip-compressed ``.jsonl.gz``: one JSON object per line, its ``text_field`` a document) and
Parquet (``.parquet``: its ``text_field`` column, one document per row). How each is read is
trainer/data/documents.py. A source's digest is the SHA-256 of the file's bytes as stored
(compressed, for ``.jsonl.gz``), hashed in chunks.
"""

from __future__ import annotations

import hashlib
import platform
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from records.data_manifest import Source as RecordedSource
from trainer.errors import DataError

STDLIB_LICENSE = "PSF-2.0"
STDLIB_URI_SCHEME = "python-stdlib"
TEXT_SUFFIXES = (".txt", ".py", ".md", ".rst", ".text")
FileFormat = Literal["text", "jsonl", "jsonl.gz", "parquet"]
READ_CHUNK = 1 << 20
"""Bytes per read when hashing or streaming a file."""


@dataclass(frozen=True, kw_only=True)
class Source:
    """One input file of the corpus."""

    uri: str
    """Machine-independent name: ``python-stdlib:3.11.7/abc.py`` or ``file:<relative path>``."""
    path: Path
    """Where the file is on this machine (not recorded: machine-specific)."""
    sha256: str
    """Hex SHA-256 of the file's bytes."""
    bytes: int
    license: str
    """SPDX identifier, or "unknown" when the caller did not say."""

    @property
    def format(self) -> FileFormat:
        return file_format(self.path) or "text"

    def record(self) -> RecordedSource:
        """What the data manifest records of this source (everything but the local path)."""
        return RecordedSource(
            uri=self.uri, sha256=self.sha256, bytes=self.bytes, license=self.license
        )


def file_format(path: Path) -> FileFormat | None:
    """The format a file name says, or None for a name that is none of the corpus formats."""
    name = path.name.lower()
    if name.endswith(".jsonl.gz"):
        return "jsonl.gz"
    if name.endswith(".jsonl"):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(TEXT_SUFFIXES):
        return "text"
    return None


def python_identity() -> dict[str, str]:
    """The interpreter whose stdlib forms the default corpus."""
    return {
        "implementation": platform.python_implementation().lower(),
        "version": platform.python_version(),
    }


def stdlib_sources(max_bytes: int) -> list[Source]:
    """The default corpus: top-level stdlib ``*.py`` files, sorted by name, within ``max_bytes``."""
    root = Path(sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise DataError(f"expected the Python standard library at {root}, it is not a directory")
    version = platform.python_version()
    sources: list[Source] = []
    total = 0
    for path in sorted(root.glob("*.py"), key=lambda p: p.name):
        size = path.stat().st_size
        if total + size > max_bytes:
            # the rule is a prefix of the sorted list, so every machine stops at the same file
            break
        total += size
        sources.append(_source(path, f"{STDLIB_URI_SCHEME}:{version}/{path.name}", STDLIB_LICENSE))
    if not sources:
        raise DataError(f"expected at least one stdlib file within {max_bytes} bytes, got none")
    return sources


def file_sources(paths: Sequence[Path], *, license: str) -> list[Source]:
    """Local files or folders (searched recursively for the corpus formats), sorted by path.

    A file named directly is read as text unless its name says another format; a compressed
    file other than ``.jsonl.gz`` is refused rather than read as text."""
    files: list[tuple[str, Path]] = []
    for given in paths:
        if given.is_dir():
            for path in sorted(given.rglob("*")):
                if path.is_file() and file_format(path) is not None:
                    files.append((f"file:{given.name}/{path.relative_to(given).as_posix()}", path))
        elif given.is_file():
            if file_format(given) is None and given.suffix.lower() in (
                ".gz",
                ".bz2",
                ".xz",
                ".zst",
                ".zip",
            ):
                raise DataError(
                    f"expected text, .jsonl, .jsonl.gz or .parquet at {given}, got a compressed "
                    f"{given.suffix} file (only JSON Lines may be gzip-compressed)"
                )
            files.append((f"file:{given.name}", given))
        else:
            raise DataError(f"expected a data file or folder at {given}, found nothing there")
    if not files:
        raise DataError(
            "expected text, .jsonl, .jsonl.gz or .parquet files "
            f"under {', '.join(map(str, paths))}, found none"
        )
    return [_source(path, uri, license) for uri, path in files]


def file_digest(path: Path) -> tuple[str, int]:
    """(hex SHA-256, size in bytes) of a file, read in chunks."""
    hasher = hashlib.sha256()
    size = 0
    with path.open("rb") as stream:
        while chunk := stream.read(READ_CHUNK):
            hasher.update(chunk)
            size += len(chunk)
    return hasher.hexdigest(), size


def _source(path: Path, uri: str, license: str) -> Source:
    sha256, size = file_digest(path)
    return Source(uri=uri, path=path, sha256=sha256, bytes=size, license=license)
