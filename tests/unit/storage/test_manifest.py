"""The checkpoint manifest: its root, its JSON, and what it refuses."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from storage.checkpoint_files import Manifest, ManifestEntry, manifest_root
from storage.errors import CheckpointError, IntegrityError

A = hashlib.sha256(b"a").hexdigest()
B = hashlib.sha256(b"b").hexdigest()


def test_the_root_hashes_the_raw_digests_in_name_order() -> None:
    manifest = Manifest.from_digests({"z.json": A, "a.safetensors": B})

    # a.safetensors sorts first, so B's 32 raw bytes come first.
    assert manifest.root == hashlib.sha256(bytes.fromhex(B) + bytes.fromhex(A)).hexdigest()
    assert manifest_root([B, A]) == manifest.root
    assert Manifest.from_digests({}).root == hashlib.sha256(b"").hexdigest()


def test_the_json_is_canonical_and_names_the_files_serialization() -> None:
    manifest = Manifest.from_digests({"b.json": B, "a.json": A})

    assert (
        manifest.to_json()
        == (
            '{"resources":['
            f'{{"algorithm":"sha256","digest":"{A}","name":"a.json"}},'
            f'{{"algorithm":"sha256","digest":"{B}","name":"b.json"}}],'
            f'"root":"{manifest.root}",'
            '"serialization":{"allow_symlinks":false,"hash_type":"sha256","method":"files"}}'
        ).encode()
    )
    assert Manifest.from_json(manifest.to_json()) == manifest


def _document(**changes: object) -> bytes:
    document = json.loads(Manifest.from_digests({"a.json": A, "b.json": B}).to_json())
    document.update(changes)
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        (b"not json", "unparsable"),
        (b"[]", "manifest keys"),
        (_document(extra=1), "manifest keys"),
        (_document(root="00" * 32), "root"),
        (
            _document(
                serialization={"method": "shards", "hash_type": "sha256", "allow_symlinks": False}
            ),
            "serialization",
        ),
        (
            _document(
                resources=[
                    {"name": "b.json", "algorithm": "sha256", "digest": B},
                    {"name": "a.json", "algorithm": "sha256", "digest": A},
                ]
            ),
            "sorted",
        ),
        (
            _document(resources=[{"name": "a.json", "algorithm": "sha256", "digest": A}] * 2),
            "unique",
        ),
        (
            _document(resources=[{"name": "../a.json", "algorithm": "sha256", "digest": A}]),
            "flat file name",
        ),
        (_document(resources=[{"name": "a.json", "algorithm": "md5", "digest": A}]), "algorithm"),
        (
            _document(resources=[{"name": "a.json", "algorithm": "sha256", "digest": "xyz"}]),
            "64 lowercase hex",
        ),
        (_document(resources=[{"name": "a.json", "digest": A}]), "resources"),
    ],
)
def test_malformed_manifests_are_refused(data: bytes, complaint: str) -> None:
    with pytest.raises(CheckpointError, match=complaint):
        Manifest.from_json(data)


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../x", "a/b", "a\\b", ".hidden", "a..b", "é.json", "x" * 256]
)
def test_file_names_must_be_flat_and_safe(name: str) -> None:
    with pytest.raises(CheckpointError, match="flat file name"):
        Manifest((ManifestEntry(name, A),))


def test_a_directory_is_checked_file_by_file(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_bytes(b"a")
    (tmp_path / "b.json").write_bytes(b"b")
    manifest = Manifest.from_directory(tmp_path)
    assert manifest.digests == {"a.json": A, "b.json": B}
    manifest.verify_directory(tmp_path)

    (tmp_path / "b.json").write_bytes(b"B")
    with pytest.raises(IntegrityError, match=r"b\.json"):
        manifest.verify_directory(tmp_path)
    (tmp_path / "b.json").unlink()
    with pytest.raises(IntegrityError, match="expected files"):
        manifest.verify_directory(tmp_path)


def test_subdirectories_and_symlinks_are_not_checkpoint_files(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_bytes(b"a")
    os.symlink(tmp_path / "a.json", tmp_path / "link.json")
    with pytest.raises(CheckpointError, match=r"link\.json"):
        Manifest.from_directory(tmp_path)

    (tmp_path / "link.json").unlink()
    (tmp_path / "nested").mkdir()
    with pytest.raises(CheckpointError, match="nested"):
        Manifest.from_directory(tmp_path)
