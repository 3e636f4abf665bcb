"""Downloading what a step needs from a :class:`~veritrain.sources.RunSource`, verified as it
arrives: the data manifest, data shards and the state recorded after a step.

The one home of these downloads: ``verify``, ``reproduce`` and ``train --resume`` all fetch
through here. A file gets its real name only once its bytes hashed to the digest that names
it, so a folder never holds unverified bytes under a verified name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from attestation.canonical import canonical_json
from records import DataManifest, DataManifestEntry, RecordError
from records.outer_step import CheckpointRef
from storage.checkpoint_files import INDEX_FILE, Manifest
from veritrain.errors import DownloadError
from veritrain.sources import SMALL_OBJECT_LIMIT, RunSource, read_verified, stream_verified

if TYPE_CHECKING:
    from trainer.checkpoint_layout import CheckpointFiles
    from trainer.data.build import PreparedData

MAX_DATA_MANIFEST_BYTES = 256 << 20


def read_data_manifest(source: RunSource, entry: DataManifestEntry) -> DataManifest:
    """The stored data manifest the entry names: re-hashed, canonical JSON, readable as a
    manifest, and equal to the entry's inline copy when it has one."""
    raw = read_verified(source, entry.manifest_object, MAX_DATA_MANIFEST_BYTES)
    try:
        document = json.loads(raw)
        if canonical_json(document) != raw:
            raise DownloadError("the data manifest object is not RFC 8785 canonical JSON")
        manifest = DataManifest.from_payload(
            document, where=f"data manifest object {entry.manifest_object[:16]}…"
        )
    except (ValueError, RecordError) as exc:
        raise DownloadError(str(exc)) from None
    if isinstance(entry.manifest, DataManifest) and entry.manifest != manifest:
        raise DownloadError("the data manifest in the entry differs from the stored one")
    return manifest


def read_checkpoint_manifest(source: RunSource, checkpoint: CheckpointRef) -> Manifest:
    """The checkpoint manifest object, re-hashed and checked to have the recorded root."""
    try:
        manifest = Manifest.from_json(
            read_verified(source, checkpoint.manifest_object, SMALL_OBJECT_LIMIT)
        )
    except ValueError as exc:
        raise DownloadError(
            f"checkpoint manifest {checkpoint.manifest_object[:16]}…: {exc}"
        ) from None
    if manifest.root != checkpoint.manifest_root:
        raise DownloadError(
            f"manifest root: expected {checkpoint.manifest_root}, "
            f"got {manifest.root} (another checkpoint?)"
        )
    return manifest


def download_checkpoint(
    source: RunSource, checkpoint: CheckpointRef, directory: Path
) -> CheckpointFiles:
    """The state a step recorded, file by file (the Hugging Face index is derived from the
    shards and left out)."""
    from trainer.checkpoint_layout import load_checkpoint_directory

    manifest = read_checkpoint_manifest(source, checkpoint)
    directory.mkdir(parents=True, exist_ok=True)
    for entry in manifest.entries:
        if entry.name != INDEX_FILE:
            download_object(source, entry.digest, directory / entry.name)
    return load_checkpoint_directory(directory)


def download_data(
    source: RunSource,
    manifest: DataManifest,
    directory: Path,
    *,
    shards: Iterable[int] | None = None,
) -> PreparedData:
    """The run's data as recorded: ``shards`` (default: all) and the tokenizer's file (if the
    corpus has one) downloaded into ``directory``, each verified against its digest (a file
    already there by that name was verified when it got it)."""
    from trainer.data.build import PreparedData
    from trainer.data.shards import DirectoryShardSource, shard_file_name

    digests = manifest.shard_digests
    wanted = sorted(digests) if shards is None else sorted(set(shards))
    directory.mkdir(parents=True, exist_ok=True)
    files = [digests[i] for i in wanted]
    if manifest.tokenizer.sha256 is not None:
        files.append(manifest.tokenizer.sha256)
    for digest in files:
        target = directory / shard_file_name(digest)
        if not target.is_file():
            download_object(source, digest, target)
    return PreparedData(manifest=manifest, source=DirectoryShardSource(directory))


def download_object(source: RunSource, digest: str, target: Path) -> int:
    """Stream one object into ``target``; the name appears only once the bytes verified."""
    partial = target.with_name(target.name + ".partial")
    with partial.open("wb") as out:
        size = stream_verified(source, digest, out.write)
    partial.rename(target)
    return size
