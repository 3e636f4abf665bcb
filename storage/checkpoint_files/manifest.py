"""A checkpoint's manifest: every file's name and SHA-256, and one root digest over them.

The layout follows the OpenSSF model-signing "files" serialization (the in-toto predicate
``https://model_signing/signature/v1.0``): a ``serialization`` block
``{"method": "files", "hash_type": "sha256", "allow_symlinks": false}`` and one
``{"name", "algorithm", "digest"}`` resource per file. The root is DESIGN.md §4's:

    root = SHA-256(raw digest of file 1 || raw digest of file 2 || ...)   files in name order

(32 raw bytes per file, names compared as UTF-8 bytes -- names are ASCII, see below). The
root is what an outer step's ledger entry and attestation statement name as the checkpoint.

File names are flat and safe: ASCII letters, digits, ``.``, ``_``, ``-``, not starting with
``.``, at most 255 bytes -- so no ``/``, no ``..``, no hidden or platform-special names, and
a manifest from an untrusted source can never write outside the directory it is unpacked in.
The JSON is written with sorted keys and no spaces; for this content (ASCII strings, no
floats) that is exactly its RFC 8785 canonical form, so equal manifests are equal bytes and
the manifest object's digest is stable.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage.errors import CheckpointError, IntegrityError, InvalidDigestError
from storage.layout import DIGEST_ALGORITHM, validate_digest
from storage.streams import file_sha256

SERIALIZATION: dict[str, Any] = {
    "method": "files",
    "hash_type": DIGEST_ALGORITHM,
    "allow_symlinks": False,
}
"""The model-signing serialization block every manifest carries."""

_SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}")


def validate_file_name(name: str) -> str:
    """Return ``name`` if it is a safe flat file name (see the module docstring), else raise
    :class:`CheckpointError`."""
    if not isinstance(name, str) or _SAFE_NAME.fullmatch(name) is None or ".." in name:
        raise CheckpointError(
            "expected a flat file name of ASCII letters, digits, '.', '_', '-' "
            f"(not starting with '.', no '..'), got {name!r:.80}"
        )
    return name


def manifest_root(digests: Iterable[str]) -> str:
    """SHA-256 (hex) of the concatenated raw digests, in the order given (name order)."""
    root = hashlib.sha256()
    for digest in digests:
        root.update(bytes.fromhex(validate_digest(digest)))
    return root.hexdigest()


@dataclass(frozen=True)
class ManifestEntry:
    """One file of a checkpoint."""

    name: str
    digest: str
    algorithm: str = DIGEST_ALGORITHM


@dataclass(frozen=True)
class Manifest:
    """The files of one checkpoint, sorted by name, each name once."""

    entries: tuple[ManifestEntry, ...]

    def __post_init__(self) -> None:
        names = [entry.name for entry in self.entries]
        for entry in self.entries:
            validate_file_name(entry.name)
            if entry.algorithm != DIGEST_ALGORITHM:
                raise CheckpointError(
                    f"expected algorithm {DIGEST_ALGORITHM!r} "
                    f"for {entry.name}, got {entry.algorithm!r}"
                )
            try:
                validate_digest(entry.digest)
            except InvalidDigestError as exc:
                raise CheckpointError(f"manifest entry {entry.name}: {exc}") from exc
        if names != sorted(set(names)):
            raise CheckpointError(f"expected manifest names sorted and unique, got {names}")

    @classmethod
    def from_digests(cls, digests: Mapping[str, str]) -> Manifest:
        """A manifest from file name -> SHA-256 (hex), e.g. gathered from several ranks."""
        return cls(tuple(ManifestEntry(name, digests[name]) for name in sorted(digests)))

    @classmethod
    def from_directory(cls, directory: str | Path) -> Manifest:
        """Hash every file of ``directory``; it must hold only regular files with safe names
        (no subdirectories, no symlinks: the serialization says allow_symlinks = false)."""
        digests: dict[str, str] = {}
        for path in sorted(Path(directory).iterdir()):
            if path.is_symlink() or not path.is_file():
                raise CheckpointError(
                    f"expected only regular files in {directory}, got {path.name!r}"
                )
            digests[validate_file_name(path.name)] = file_sha256(path)[0]
        return cls.from_digests(digests)

    @property
    def root(self) -> str:
        """The manifest root (hex): what the ledger and attestations name the checkpoint by."""
        return manifest_root(entry.digest for entry in self.entries)

    @property
    def digests(self) -> dict[str, str]:
        """File name -> SHA-256 (hex)."""
        return {entry.name: entry.digest for entry in self.entries}

    def to_json(self) -> bytes:
        """The manifest as canonical JSON bytes (sorted keys, no whitespace)."""
        document = {
            "serialization": SERIALIZATION,
            "resources": [
                {"name": e.name, "algorithm": e.algorithm, "digest": e.digest} for e in self.entries
            ],
            "root": self.root,
        }
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        """Parse and check a manifest: exact keys, the files serialization, safe sorted names,
        well-formed digests, and a root that recomputes."""
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"expected a JSON manifest, got unparsable bytes: {exc}") from exc
        if not isinstance(document, dict) or set(document) != {
            "serialization",
            "resources",
            "root",
        }:
            got = sorted(document) if isinstance(document, dict) else type(document).__name__
            raise CheckpointError(
                f"expected manifest keys ['resources', 'root', 'serialization'], got {got}"
            )
        if document["serialization"] != SERIALIZATION:
            raise CheckpointError(
                f"expected serialization {SERIALIZATION}, got {document['serialization']!r}"
            )
        resources = document["resources"]
        if not isinstance(resources, list) or not all(
            isinstance(r, dict) and set(r) == {"name", "algorithm", "digest"} for r in resources
        ):
            raise CheckpointError(
                "expected resources as a list of {name, algorithm, digest} objects"
            )
        manifest = cls(
            tuple(ManifestEntry(r["name"], r["digest"], r["algorithm"]) for r in resources)
        )
        if document["root"] != manifest.root:
            raise CheckpointError(
                f"expected the manifest root to be {manifest.root} "
                f"(recomputed), got {document['root']!r}"
            )
        return manifest

    def verify_directory(self, directory: str | Path) -> None:
        """Return None if ``directory`` holds exactly these files with these digests (so its
        recomputed root equals :attr:`root`); else raise :class:`IntegrityError` naming the
        first file that differs."""
        found = Manifest.from_directory(directory)
        expected, actual = self.digests, found.digests
        if set(expected) != set(actual):
            raise IntegrityError(
                f"expected files {sorted(expected)} in {directory}, got {sorted(actual)}"
            )
        for name, digest in expected.items():
            if actual[name] != digest:
                raise IntegrityError(
                    f"expected {name} to hash to sha256 {digest}, got {actual[name]}"
                )
        if found.root != self.root:  # implied by the above; checked as the contract states it
            raise IntegrityError(f"expected manifest root {self.root}, got {found.root}")
