"""Object downloads from the local store (Starlette ``FileResponse`` given the app's range
decision): the whole download contract."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from unit.web.download_contract import Blob, DownloadContract, random_blob
from unit.web.web_fixture_run import DemoRun

from storage import open_store


@pytest.fixture(scope="module")
def blob(demo_run: DemoRun) -> Blob:
    data = random_blob()
    with open_store(demo_run.store_url) as store:
        return Blob(store.put_bytes(data), data)


@pytest.fixture
def http(client: TestClient) -> TestClient:
    return client


class TestLocalStore(DownloadContract):
    pass


def test_stored_checkpoint_files_are_downloadable_by_their_manifest_digest(
    client: TestClient, demo_run: DemoRun
) -> None:
    import hashlib

    for name, digest in demo_run.checkpoints[2].files.items():
        response = client.get(f"/api/v1/objects/{digest}")
        assert response.status_code == 200, name
        assert hashlib.sha256(response.content).hexdigest() == digest
