"""Giving back the buckets the ``s3_store_url`` fixture creates.

SeaweedFS backs every bucket with its own collection of volumes, and a small test server
runs out of volumes after about a hundred buckets ("No writable volumes and no free volumes
left"), after which every S3 test fails. Tests that take a bucket therefore empty and delete
it when they end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def disposable_bucket(url: str, client: Any) -> Iterator[str]:
    """Yield ``url`` (``s3://bucket/...``); afterwards abort its unfinished uploads, delete its
    objects, and delete the bucket."""
    bucket = url.removeprefix("s3://").partition("/")[0]
    try:
        yield url
    finally:
        for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
            client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=bucket, Delete={"Objects": keys})
        client.delete_bucket(Bucket=bucket)
