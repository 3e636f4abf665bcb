"""The local-folder store: the shared store contract, plus what only a folder can show."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from unit.storage.store_contract import DATA, Leftovers, StoreContract, Tamper, WriteRaw, sha256

from storage import LocalStore, open_store
from storage.local import publish_once


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "objects")


@pytest.fixture
def tamper(store: LocalStore) -> Tamper:
    def overwrite(digest: str, data: bytes) -> None:
        path = store.path_for(digest)
        os.chmod(path, 0o644)
        path.write_bytes(data)

    return overwrite


@pytest.fixture
def write_raw(store: LocalStore, tmp_path: Path) -> WriteRaw:
    def publish(digest: str, data: bytes) -> None:
        source = tmp_path / "raw.part"
        source.write_bytes(data)
        publish_once(source, store.path_for(digest))

    return publish


@pytest.fixture
def leftovers(store: LocalStore) -> Leftovers:
    return lambda: sorted(p.name for p in (store.root / ".tmp").iterdir())


class TestLocalStore(StoreContract):
    pass


def test_objects_are_read_only_files_under_sha256(store: LocalStore) -> None:
    digest = store.put_bytes(DATA)

    path = store.local_path(digest)
    assert path == store.root / "sha256" / digest
    assert path.read_bytes() == DATA
    assert stat.S_IMODE(path.stat().st_mode) & 0o222 == 0
    assert store.presigned_url(digest) is None


def test_open_store_takes_relative_and_absolute_file_urls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    relative = open_store("file://./data/objects")
    absolute = open_store(f"file://{tmp_path}/other")
    digest = relative.put_bytes(DATA)

    assert isinstance(relative, LocalStore)
    assert (tmp_path / "data" / "objects" / "sha256" / digest).is_file()
    assert absolute.url == f"file://{tmp_path}/other"
    assert not absolute.exists(digest)
    assert digest == sha256(DATA)
