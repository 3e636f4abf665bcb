"""Choosing a back-end from a store URL (``VERITRAIN_STORE_URL``).

``file://<path>`` -- a local folder; the path is everything after ``file://`` and may be
relative (``file://./veritrain-data/objects``) or absolute (``file:///srv/objects``).
``s3://<bucket>[/<prefix>]`` -- an S3 bucket; endpoint, region and credentials come from the
AWS_* environment (``AWS_ENDPOINT_URL`` for MinIO/SeaweedFS).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from storage.base import ObjectStore
from storage.errors import StoreURLError

# S3 bucket naming rules (AWS "Bucket naming rules"): 3-63 lowercase letters, digits, dots
# and hyphens, starting and ending with a letter or digit.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def open_store(url: str) -> ObjectStore:
    """The object store a URL names; :class:`StoreURLError` if it names none."""
    if url.startswith("file://"):
        path = url[len("file://") :]
        if not path:
            raise StoreURLError(f"expected file://<path>, got {url!r}")
        from storage.local import LocalStore

        return LocalStore(path)
    if url.startswith("s3://"):
        parts = urlsplit(url)
        if _BUCKET.fullmatch(parts.netloc) is None or parts.query or parts.fragment:
            raise StoreURLError(
                f"expected s3://<bucket>[/<prefix>] with a valid bucket name, got {url!r}"
            )
        from storage.s3 import S3Store

        return S3Store(parts.netloc, parts.path)
    raise StoreURLError(f"expected a store URL starting with file:// or s3://, got {url!r}")
