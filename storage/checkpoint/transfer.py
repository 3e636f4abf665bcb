"""Moving a checkpoint between a local directory and an object store.

Upload: every file first, each stored under its own SHA-256 and checked by reading back the
stored size; the manifest JSON last, as its own object, so a manifest in the store only ever
names files that are already there. The manifest object's digest is the handle to the whole
checkpoint (its *root*, inside it, is what the ledger records).

Download: fetch the manifest by digest, then every file, each verified as it streams (a file
that does not hash to its entry is never given its name), and finally recompute the root
from the files on disk.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from storage.base import ObjectStore
from storage.checkpoint.manifest import Manifest
from storage.errors import CheckpointError, IntegrityError
from storage.streams import file_sha256

MAX_MANIFEST_BYTES = 4 << 20
"""A manifest is a few hundred bytes per file; anything larger is not one."""


def upload_checkpoint(store: ObjectStore, directory: str | Path, manifest: Manifest | None = None) -> str:
    """Upload a checkpoint directory's files, then its manifest; return the manifest
    object's digest. With ``manifest``, the directory must match it exactly."""
    root = Path(directory)
    if manifest is None:
        manifest = Manifest.from_directory(root)
    else:
        manifest.verify_directory(root)
    for entry in manifest.entries:
        path = root / entry.name
        stored = store.put_file(path)
        if stored != entry.digest:
            raise IntegrityError(f"expected {path} to hash to sha256 {entry.digest}, got {stored} (it changed)")
        size, stored_size = path.stat().st_size, store.size(stored)
        if stored_size != size:
            raise IntegrityError(
                f"expected the stored copy of {entry.name} (sha256/{stored}) to be {size} bytes, got {stored_size}"
            )
    return store.put_bytes(manifest.to_json())


def read_manifest(store: ObjectStore, manifest_digest: str) -> Manifest:
    """The manifest stored under ``manifest_digest``, verified and parsed."""
    return Manifest.from_json(store.read_bytes(manifest_digest, max_size=MAX_MANIFEST_BYTES))


def download_checkpoint(store: ObjectStore, manifest_digest: str, directory: str | Path) -> Manifest:
    """Download the checkpoint whose manifest is stored under ``manifest_digest`` into
    ``directory`` and return the manifest. Files already present with the right digest are
    kept (a resumed download); any other file in the directory is refused."""
    manifest = read_manifest(store, manifest_digest)
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    strangers = sorted(p.name for p in root.iterdir() if p.name not in manifest.digests)
    if strangers:
        raise CheckpointError(f"expected {root} to hold only files of the checkpoint, got {strangers}")
    for entry in manifest.entries:
        target = root / entry.name
        if target.exists() and file_sha256(target)[0] == entry.digest:
            continue
        _download_file(store, entry.digest, target)
    manifest.verify_directory(root)
    return manifest


def _download_file(store: ObjectStore, digest: str, target: Path) -> None:
    # Stream into a hidden partial file, then rename: the name appears only for verified bytes.
    partial = target.with_name(f".{target.name}.partial")
    try:
        with store.open(digest) as reader, open(partial, "wb") as f:
            for chunk in reader:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
