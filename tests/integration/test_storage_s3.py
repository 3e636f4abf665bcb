"""The S3 store against the real SeaweedFS: the shared store contract, plus what only S3
shows (key layout in the bucket, multipart uploads, presigned URLs).

The tests share one bucket and one store client, each test under a key prefix of its own
(SeaweedFS creates volumes for every new bucket; ``s3_client()`` loads botocore's service model
anew each time, ~0.2 CPU-s: per test, that was half of this file's CPU). A store writes
only under its prefix, so each test sees only its own objects; unfinished multipart uploads are
still looked for in the whole bucket, whose tests run one after another in one process (pytest
-xdist gives each worker a bucket of its own), so an upload left there is a leak as before."""

from __future__ import annotations

import hashlib
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from unit.storage.payloads import deterministic_chunks
from unit.storage.store_contract import DATA, Leftovers, StoreContract, Tamper, WriteRaw, sha256

from storage import open_store
from storage.errors import StorageError
from storage.s3 import S3Store, s3_client
from storage.s3_upload import MIN_PART_SIZE, upload_once

MiB = 1 << 20


def _bucket_and_prefix(url: str) -> tuple[str, str]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    return bucket, prefix


def _aws_environment(s3_server: Any) -> dict[str, str]:
    """The AWS_* variables a production deployment sets (boto3 honours AWS_ENDPOINT_URL)."""
    return {
        "AWS_ENDPOINT_URL": s3_server.endpoint,
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        "AWS_DEFAULT_REGION": s3_server.region,
    }


@pytest.fixture(scope="module")
def raw(s3_server: Any) -> Any:
    """A boto3 client that goes around the store, for inspecting and tampering."""
    return s3_server.client()


@pytest.fixture(scope="module")
def store_client(s3_server: Any) -> Iterator[Any]:
    """The client the ``store`` fixture's stores share, made by ``storage.s3.s3_client`` from
    the AWS_* variables as a store makes its own: once per module, because each one loads
    botocore's service model anew (~0.2 CPU-s; most of this file's CPU when made per test)."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in _aws_environment(s3_server).items():
            patch.setenv(name, value)
        client = s3_client()
    yield client
    client.close()


@pytest.fixture(scope="module")
def shared_bucket(raw: Any) -> Iterator[str]:
    """A fresh bucket for this module, emptied and deleted afterwards."""
    bucket = f"veritrain-{uuid.uuid4().hex[:12]}"
    raw.create_bucket(Bucket=bucket)
    try:
        yield bucket
    finally:
        for upload in raw.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
            key, upload_id = upload["Key"], upload["UploadId"]
            raw.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        for page in raw.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                raw.delete_objects(Bucket=bucket, Delete={"Objects": keys})
        raw.delete_bucket(Bucket=bucket)


@pytest.fixture
def s3_url(shared_bucket: str, s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """``s3://<the module's bucket>/<a prefix of this test's own>``, with the AWS_* variables
    set for stores the test opens itself (``open_store``)."""
    for name, value in _aws_environment(s3_server).items():
        monkeypatch.setenv(name, value)
    return f"s3://{shared_bucket}/t-{uuid.uuid4().hex[:12]}"


def _open_uploads(raw: Any, store: S3Store) -> list[dict[str, Any]]:
    """Unfinished multipart uploads anywhere in the store's bucket."""
    return list(raw.list_multipart_uploads(Bucket=store.bucket).get("Uploads", []))


@pytest.fixture
def store(s3_url: str, store_client: Any, tmp_path: Path) -> S3Store:
    # The smallest part S3 allows, so a 12 MiB test object already takes three parts. Not
    # closed: closing a store closes its client, which the module's stores share.
    bucket, prefix = _bucket_and_prefix(s3_url)
    spool = tmp_path / "spool"
    spool.mkdir()
    return S3Store(bucket, prefix, client=store_client, part_size=MIN_PART_SIZE, spool_dir=spool)


@pytest.fixture
def tamper(store: S3Store, raw: Any) -> Tamper:
    def overwrite(digest: str, data: bytes) -> None:
        raw.put_object(Bucket=store.bucket, Key=store.key_for(digest), Body=data)

    return overwrite


@pytest.fixture
def write_raw(store: S3Store, raw: Any) -> WriteRaw:
    def upload(digest: str, data: bytes) -> None:
        upload_once(
            raw,
            bucket=store.bucket,
            key=store.key_for(digest),
            chunks=[data],
            part_size=MIN_PART_SIZE,
            before_commit=lambda size: None,
        )

    return upload


@pytest.fixture
def leftovers(store: S3Store, raw: Any, tmp_path: Path) -> Leftovers:
    def find() -> list[str]:
        uploads = _open_uploads(raw, store)
        spooled = [p.name for p in (tmp_path / "spool").iterdir()]
        return sorted([f"upload:{u['Key']}" for u in uploads] + spooled)

    return find


class TestS3Store(StoreContract):
    pass


def test_open_store_finds_the_server_through_aws_endpoint_url(s3_url: str, raw: Any) -> None:
    bucket, prefix = _bucket_and_prefix(s3_url)

    with open_store(s3_url) as store:
        digest = store.put_bytes(DATA)

    assert isinstance(store, S3Store)
    assert store.url == s3_url
    stored = raw.get_object(Bucket=bucket, Key=f"{prefix}/sha256/{digest}")["Body"].read()
    assert stored == DATA


def test_a_large_put_is_one_multipart_upload_and_leaves_none_open(s3_url: str, raw: Any) -> None:
    size = 70 * MiB
    with open_store(s3_url) as store:
        assert isinstance(store, S3Store)
        tracemalloc.start()
        try:
            digest = store.put(deterministic_chunks(size, seed=5))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        head = raw.head_object(Bucket=store.bucket, Key=store.key_for(digest))

    # An S3 multipart ETag is "<md5 of part md5s>-<part count>": 70 MiB in 16 MiB parts.
    assert head["ETag"].strip('"').endswith("-5")
    assert head["ContentLength"] == size
    assert _open_uploads(raw, store) == []
    # About two 16 MiB parts at most: the buffer being filled and the part cut from it.
    assert peak < 3 * 16 * MiB, f"put peaked at {peak / MiB:.1f} MiB"


def test_a_presigned_url_fetches_the_object_with_plain_http(store: S3Store) -> None:
    digest = store.put_bytes(DATA)

    url = store.presigned_url(digest, expires_s=60)
    response = httpx.get(url)

    assert response.status_code == 200
    assert hashlib.sha256(response.content).hexdigest() == digest
    assert store.local_path(digest) is None


def test_presigned_urls_respect_the_sigv4_lifetime_limit(store: S3Store) -> None:
    with pytest.raises(StorageError, match="604800"):
        store.presigned_url(sha256(DATA), expires_s=8 * 24 * 3600)
