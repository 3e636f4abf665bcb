"""The web app in its production shape: a PostgreSQL ledger and an S3 store (SeaweedFS).

- a run recorded on PostgreSQL + S3 is served: API, page, checkpoint manifests;
- downloads proxied from S3 obey the same contract as local files (Range, multipart,
  If-Range, 304, 416);
- with presigned downloads, objects and Hugging Face ``resolve`` answer 302 to S3, and
  ``hf_hub_download`` follows it to the right bytes.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from unit.web.download_contract import Blob, DownloadContract, random_blob
from unit.web.web_fixture_run import DemoRun, record_demo_run, settings_for

from ledger.db import upgrade
from storage import open_store
from web.app import create_app
from web.server import serve_in_thread
from web.settings import AppSettings


@pytest.fixture(scope="module")
def module_bucket(s3_server) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """One bucket for the module's download-contract tests (the per-test ``s3_store_url``
    would cost a bucket per test), with the AWS_* settings a deployment has."""
    bucket = f"veritrain-web-{uuid.uuid4().hex[:10]}"
    client = s3_server.client()
    client.create_bucket(Bucket=bucket)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
        env.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
        env.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
        env.setenv("AWS_DEFAULT_REGION", s3_server.region)
        try:
            yield f"s3://{bucket}/objects"
        finally:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for item in page.get("Contents", []):
                    client.delete_object(Bucket=bucket, Key=item["Key"])
            client.delete_bucket(Bucket=bucket)


@pytest.fixture(scope="module")
def blob(module_bucket: str) -> Blob:
    data = random_blob()
    with open_store(module_bucket) as store:
        return Blob(store.put_bytes(data), data)


@pytest.fixture(scope="module")
def http(module_bucket: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app streaming objects from S3 through itself (presigned downloads off)."""
    database_url = f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'ledger.db'}"
    upgrade(database_url)
    settings = AppSettings(
        database_url=database_url, store_url=module_bucket, s3_presign_downloads=False
    )
    with TestClient(create_app(settings)) as client:
        yield client


class TestS3Proxy(DownloadContract):
    pass


@pytest.fixture
def production_run(postgres_url: str, s3_store_url: str) -> DemoRun:
    return record_demo_run(postgres_url, s3_store_url, steps=3)


def test_a_run_on_postgres_and_s3_is_served_whole(production_run: DemoRun) -> None:
    run = production_run
    with TestClient(create_app(settings_for(run, presign=False))) as client:
        assert client.get("/healthz").json() == {"status": "ok", "database": "ok", "store": "ok"}
        entries = client.get(f"/api/v1/runs/{run.run_id}/entries").json()["entries"]
        assert [e["kind"] for e in entries] == [
            "run.genesis",
            "data.manifest",
            "outer_step",
            "outer_step",
            "outer_step",
            "run.final",
        ]
        checkpoint = client.get(f"/api/v1/runs/{run.run_id}/steps/2/checkpoint").json()
        assert checkpoint["manifest_root"] == run.checkpoints[2].manifest_root
        for f in checkpoint["files"]:
            body = client.get(f["resolve_url"]).content
            assert hashlib.sha256(body).hexdigest() == f["digest"]
            assert len(body) == f["size"]
        page = client.get(f"/runs/{run.run_id}").text
        assert 'class="card ok"' in page
        assert page.count('class="download"') == len(run.checkpoints[2].files)


def test_presigned_downloads_redirect_to_s3_and_the_bytes_check_out(
    production_run: DemoRun,
) -> None:
    run = production_run
    digest = run.checkpoints[1].files["trainer_state.json"]
    with TestClient(create_app(settings_for(run, presign=True))) as client:
        redirect = client.get(f"/api/v1/objects/{digest}", follow_redirects=False)
        head = client.head(
            f"/{run.run_id}/resolve/step-000001/trainer_state.json", follow_redirects=False
        )

    assert redirect.status_code == 302
    assert redirect.headers["etag"] == f'"{digest}"'
    location = redirect.headers["location"]
    assert "X-Amz-Signature=" in location
    assert hashlib.sha256(httpx.get(location).content).hexdigest() == digest
    tail = httpx.get(location, headers={"Range": "bytes=5-"})
    assert (
        tail.status_code == 206
        and hashlib.sha256(httpx.get(location).content[:5] + tail.content).hexdigest() == digest
    )
    assert head.status_code == 302
    assert head.headers["x-linked-etag"] == f'"{digest}"'
    assert head.headers["x-repo-commit"] == run.checkpoints[1].manifest_root
    assert int(head.headers["x-linked-size"]) == len(httpx.get(head.headers["location"]).content)


def test_hf_hub_download_follows_the_redirect_to_s3(
    production_run: DemoRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants as hub
    from huggingface_hub import hf_hub_download

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "HF_HUB_DISABLE_XET", True)
    run = production_run
    with serve_in_thread(settings_for(run, presign=True)) as url:
        name = sorted(n for n in run.checkpoints[2].files if n.startswith("model-0"))[-1]
        path = hf_hub_download(
            repo_id=run.run_id,
            filename=name,
            revision="step-000002",
            endpoint=url,
            cache_dir=tmp_path,
        )

    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == run.checkpoints[2].files[name]


def test_a_corrupt_object_in_s3_never_completes_through_the_proxy(
    module_bucket: str, s3_server, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    genuine = random_blob(3 << 20, seed=3)
    digest = hashlib.sha256(genuine).hexdigest()
    tampered = genuine[:-1] + bytes([genuine[-1] ^ 1])
    bucket, prefix = module_bucket.removeprefix("s3://").split("/", 1)
    # Write straight to the key, as someone with bucket access could (the store never would).
    s3_server.client().put_object(Bucket=bucket, Key=f"{prefix}/sha256/{digest}", Body=tampered)
    database_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    upgrade(database_url)
    settings = AppSettings(
        database_url=database_url, store_url=module_bucket, s3_presign_downloads=False
    )

    with (
        serve_in_thread(settings) as url,
        httpx.stream("GET", f"{url}/api/v1/objects/{digest}") as response,
    ):
        assert response.headers["content-length"] == str(len(genuine))
        received = bytearray()
        with pytest.raises(httpx.RemoteProtocolError):
            for chunk in response.iter_raw():
                received += chunk
    assert len(received) < len(genuine)
    assert bytes(received) == tampered[: len(received)]
