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
from collections.abc import Mapping
from pathlib import Path

from storage.base import ObjectStore
from storage.checkpoint_files.manifest import Manifest, validate_file_name
from storage.errors import CheckpointError, IntegrityError, ObjectNotFoundError
from storage.streams import check_stored_size, file_sha256

MAX_MANIFEST_BYTES = 4 << 20
"""A manifest is a few hundred bytes per file; anything larger is not one."""


def upload_files(store: ObjectStore, directory: str | Path, digests: Mapping[str, str]) -> None:
    """Upload the named files of ``directory``, each of which must hash to its digest in
    ``digests`` (file name -> SHA-256 hex); each upload is confirmed by the stored size. One
    rank of a multi-process run uploads its own files this way; the coordinator then stores
    the manifest (:func:`upload_manifest`)."""
    root = Path(directory)
    for name, digest in sorted(digests.items()):
        path = root / validate_file_name(name)
        stored = store.put_file(path)
        if stored != digest:
            raise IntegrityError(
                f"expected {path} to hash to sha256 {digest}, got {stored} (it changed)"
            )
        check_stored_size(stored, path.stat().st_size, store.size(stored))


def upload_manifest(store: ObjectStore, manifest: Manifest) -> str:
    """Store the manifest JSON as its own object, once every file it names is stored (else
    :class:`ObjectNotFoundError`), and return the manifest object's digest."""
    for entry in manifest.entries:
        if not store.exists(entry.digest):
            raise ObjectNotFoundError(
                f"expected {entry.name} (sha256/{entry.digest}) "
                f"in {store.url} before its manifest, found none"
            )
    return store.put_bytes(manifest.to_json())


def read_manifest(store: ObjectStore, manifest_digest: str) -> Manifest:
    """The manifest stored under ``manifest_digest``, verified and parsed."""
    return Manifest.from_json(store.read_bytes(manifest_digest, max_size=MAX_MANIFEST_BYTES))


def download_checkpoint(
    store: ObjectStore, manifest_digest: str, directory: str | Path
) -> Manifest:
    """Download the checkpoint whose manifest is stored under ``manifest_digest`` into
    ``directory`` and return the manifest. Files already present with the right digest are
    kept (a resumed download); any other file in the directory is refused."""
    manifest = read_manifest(store, manifest_digest)
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    strangers = sorted(p.name for p in root.iterdir() if p.name not in manifest.digests)
    if strangers:
        raise CheckpointError(
            f"expected {root} to hold only files of the checkpoint, got {strangers}"
        )
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
