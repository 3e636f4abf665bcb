"""The S3 store against the real SeaweedFS: the shared store contract, plus what only S3
shows (key layout in the bucket, multipart uploads, presigned URLs)."""

from __future__ import annotations

import hashlib
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from unit.storage.payloads import deterministic_chunks
from unit.storage.store_contract import DATA, Leftovers, StoreContract, Tamper, WriteRaw, sha256

from storage import open_store
from storage.errors import StorageError
from storage.s3 import S3Store
from storage.s3_upload import MIN_PART_SIZE, upload_once

MiB = 1 << 20


def _bucket_and_prefix(url: str) -> tuple[str, str]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    return bucket, prefix


@pytest.fixture
def raw(s3_server: Any) -> Any:
    """A boto3 client that goes around the store, for inspecting and tampering."""
    return s3_server.client()


@pytest.fixture
def s3_url(s3_store_url: str) -> str:
    return s3_store_url


@pytest.fixture
def store(s3_url: str, tmp_path: Path) -> Iterator[S3Store]:
    # The smallest part S3 allows, so a 12 MiB test object already takes three parts.
    bucket, prefix = _bucket_and_prefix(s3_url)
    spool = tmp_path / "spool"
    spool.mkdir()
    with S3Store(bucket, prefix, part_size=MIN_PART_SIZE, spool_dir=spool) as s3:
        yield s3


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
        uploads = raw.list_multipart_uploads(Bucket=store.bucket).get("Uploads", [])
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
    assert raw.list_multipart_uploads(Bucket=store.bucket).get("Uploads", []) == []
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
