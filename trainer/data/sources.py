"""Corpus sources: where the training text comes from, with digests and licences.

The default corpus is one every machine with Python already has: the standard library's own
``.py`` sources (licence PSF-2.0). The subset is deterministic -- the top-level ``*.py`` files
of the stdlib folder, in sorted file-name order, taken while their running total stays within
a byte budget -- so the same Python version yields the same corpus (and the same digests) on
every machine. The Python version is recorded next to the sources because another version has
other files. Local ``.txt``/``.py``/``.md`` files are one document each; ``.jsonl`` files hold one
JSON object per line whose ``"text"`` field is a document.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sysconfig
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from records.data_manifest import Source as RecordedSource
from trainer.errors import DataError

STDLIB_LICENSE = "PSF-2.0"
STDLIB_URI_SCHEME = "python-stdlib"
TEXT_SUFFIXES = (".txt", ".py", ".md", ".rst", ".text")


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

    def record(self) -> RecordedSource:
        """What the data manifest records of this source (everything but the local path)."""
        return RecordedSource(uri=self.uri, sha256=self.sha256, bytes=self.bytes, license=self.license)


def python_identity() -> dict[str, str]:
    """The interpreter whose stdlib forms the default corpus."""
    return {"implementation": platform.python_implementation().lower(), "version": platform.python_version()}


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
            break  # the rule is a prefix of the sorted list, so every machine stops at the same file
        total += size
        sources.append(_source(path, f"{STDLIB_URI_SCHEME}:{version}/{path.name}", STDLIB_LICENSE))
    if not sources:
        raise DataError(f"expected at least one stdlib file within {max_bytes} bytes, got none")
    return sources


def file_sources(paths: Sequence[Path], *, license: str) -> list[Source]:
    """Local files or folders (searched recursively for text and JSONL files), sorted by path."""
    files: list[tuple[str, Path]] = []
    for given in paths:
        if given.is_dir():
            for path in sorted(given.rglob("*")):
                if path.is_file() and path.suffix in (*TEXT_SUFFIXES, ".jsonl"):
                    files.append((f"file:{given.name}/{path.relative_to(given).as_posix()}", path))
        elif given.is_file():
            files.append((f"file:{given.name}", given))
        else:
            raise DataError(f"expected a data file or folder at {given}, found nothing there")
    if not files:
        raise DataError(f"expected text or .jsonl files under {', '.join(map(str, paths))}, found none")
    return [_source(path, uri, license) for uri, path in files]


def documents(source: Source) -> Iterator[str]:
    """The documents of one source, checking that its bytes still match the recorded digest."""
    data = source.path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != source.sha256:
        raise DataError(f"expected {source.uri} to have sha256 {source.sha256}, got {digest}")
    text = data.decode("utf-8", errors="replace")
    if source.path.suffix != ".jsonl":
        yield text
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"expected JSON on line {number} of {source.uri}, got: {exc}") from exc
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise DataError(f"expected an object with a string 'text' on line {number} of {source.uri}")
        yield record["text"]


def _source(path: Path, uri: str, license: str) -> Source:
    data = path.read_bytes()
    return Source(uri=uri, path=path, sha256=hashlib.sha256(data).hexdigest(), bytes=len(data), license=license)
