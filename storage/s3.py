"""The S3 back-end (AWS S3, MinIO, SeaweedFS, ...) through boto3.

Objects live at ``<prefix>/sha256/<hex>`` in one bucket. The client signs with SigV4 and
addresses buckets path-style (``http://host/bucket/key``): presigned URLs and S3-compatible
servers without wildcard DNS need both (DESIGN.md §2). The endpoint comes from boto3's own
configuration chain, so ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3`` point it at a
non-AWS server (botocore >= 1.31 reads them when no endpoint_url is passed).

Writes: a stream whose digest the caller already knows (``put_bytes``, ``put_file``,
``put(..., expected_sha256=...)``) goes straight to its final key, verified before the
upload is committed (:mod:`storage.s3_upload`). A stream of unknown digest is first spooled
to a local temporary file while hashing (bounded memory; the key is unknown until the last
byte), then uploaded the same way. Either way the commit carries ``If-None-Match: *``, so an
existing object is never replaced; finding one is success once its size is confirmed.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError
from urllib3.exceptions import HTTPError

from storage.base import ObjectStore
from storage.errors import (
    InvalidRangeError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)
from storage.layout import normalize_prefix, object_key, validate_digest
from storage.reader import ObjectReader
from storage.s3_errors import s3_errors
from storage.s3_upload import upload_once
from storage.streams import (
    CHUNK_SIZE,
    Sha256Stream,
    check_digest,
    check_stored_size,
    iter_chunks,
    spooled,
)

if TYPE_CHECKING:
    from botocore.response import StreamingBody
    from mypy_boto3_s3 import S3Client

DEFAULT_PART_SIZE = 16 << 20
"""16 MiB parts: objects up to 160 GB in S3's 10,000 parts, about 40 MiB of memory per upload."""

MAX_PRESIGN_SECONDS = 7 * 24 * 3600
"""SigV4 presigned URLs are valid for at most seven days."""

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


def s3_client() -> S3Client:
    """A boto3 S3 client with SigV4, path-style addressing and standard retries; credentials,
    region and endpoint come from the environment (AWS_*) as boto3 resolves them."""
    import boto3
    from botocore.config import Config

    config = Config(
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        retries={"mode": "standard", "max_attempts": 5},
    )
    # A session per client: boto3's default session is not safe to share across threads.
    return boto3.session.Session().client("s3", config=config)


class S3Store(ObjectStore):
    """Objects under ``s3://bucket/prefix/sha256/<hex>``."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: S3Client | None = None,
        part_size: int = DEFAULT_PART_SIZE,
        spool_dir: str | Path | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = normalize_prefix(prefix)
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.part_size = part_size
        self._client = client if client is not None else s3_client()
        self._spool_dir = Path(spool_dir if spool_dir is not None else tempfile.gettempdir())

    def key_for(self, digest: str) -> str:
        """The object's key in the bucket; the digest is validated."""
        return object_key(self.prefix, digest)

    # --- ObjectStore --------------------------------------------------------------------

    def exists(self, digest: str) -> bool:
        return self._stored_size(self.key_for(digest)) is not None

    def size(self, digest: str) -> int:
        size = self._stored_size(self.key_for(digest))
        if size is None:
            raise ObjectNotFoundError(f"no object sha256/{digest} in {self.url}")
        return size

    def local_path(self, digest: str) -> None:
        validate_digest(digest)
        return None

    def presigned_url(self, digest: str, expires_s: int = 3600) -> str:
        if not 1 <= expires_s <= MAX_PRESIGN_SECONDS:
            raise StorageError(
                "expected expires_s between 1 and "
                f"{MAX_PRESIGN_SECONDS} (SigV4 limit), got {expires_s}"
            )
        key = self.key_for(digest)
        with s3_errors("presign GetObject", self._location(key)):
            return self._client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_s
            )

    def close(self) -> None:
        self._client.close()

    def _put_chunks(self, chunks: Iterator[bytes], expected_sha256: str | None) -> str:
        if expected_sha256 is not None:
            self._upload(chunks, expected_sha256)
            return expected_sha256
        with spooled(chunks, self._spool_dir, durable=False) as spool, open(spool.path, "rb") as f:
            self._upload(iter_chunks(f), spool.digest)
        return spool.digest

    def _open_range(self, digest: str, start: int, end: int | None) -> ObjectReader:
        key = self.key_for(digest)
        if end is not None and end == start:
            # An empty range has no HTTP Range form; it is valid if start is within the object.
            return self._empty_reader(digest, start)
        ranged = not (start == 0 and end is None)
        # RFC 9110 §14.1.2: byte positions are inclusive, so [start, end) is start-(end - 1).
        request_range = f"bytes={start}-{'' if end is None else end - 1}"
        try:
            with s3_errors("GetObject", self._location(key)):
                if ranged:
                    response = self._client.get_object(
                        Bucket=self.bucket, Key=key, Range=request_range
                    )
                else:
                    response = self._client.get_object(Bucket=self.bucket, Key=key)
        except InvalidRangeError:
            # S3 refuses a range starting at the end; slice semantics allow it (empty).
            return self._empty_reader(digest, start)
        if ranged and "ContentRange" not in response:
            response["Body"].close()
            raise StorageError(
                f"expected a partial response to Range {request_range} from {self._location(key)}, "
                f"got the whole object"
            )
        object_size = _object_size(response.get("ContentRange"), response["ContentLength"])
        stop = object_size if end is None else min(end, object_size)
        body = response["Body"]
        return ObjectReader(
            _body_chunks(body, self._location(key)),
            digest=digest,
            start=start,
            end=stop,
            object_size=object_size,
            release=body.close,
        )

    # --- helpers --------------------------------------------------------------------------

    def _upload(self, chunks: Iterator[bytes], digest: str) -> None:
        """Upload chunks that must hash to ``digest`` to its key, write-once."""
        key = self.key_for(digest)
        hasher = Sha256Stream()
        hashed = hasher.wrap(chunks)
        stored = self._stored_size(key)
        if stored is not None:
            # Already there: do not upload again, but the caller's bytes must still be the
            # bytes of that digest, and the stored copy must be whole.
            for _ in hashed:
                pass
            check_digest(hasher.hexdigest(), digest, "the stream")
            check_stored_size(digest, hasher.size, stored)
            return

        def before_commit(size: int) -> None:
            check_digest(
                hasher.hexdigest(), digest, f"the stream uploaded to {self._location(key)}"
            )

        try:
            upload_once(
                self._client,
                bucket=self.bucket,
                key=key,
                chunks=hashed,
                part_size=self.part_size,
                before_commit=before_commit,
            )
        except ObjectExistsError:
            # Another writer committed the same digest first (the check above raced it).
            check_stored_size(digest, hasher.size, self.size(digest))

    def _stored_size(self, key: str) -> int | None:
        try:
            with s3_errors("HeadObject", self._location(key)):
                return self._client.head_object(Bucket=self.bucket, Key=key)["ContentLength"]
        except ObjectNotFoundError:
            return None

    def _empty_reader(self, digest: str, start: int) -> ObjectReader:
        object_size = self.size(digest)
        if start > object_size:
            raise InvalidRangeError(
                f"expected start <= {object_size} (the size of sha256/{digest}), got {start}"
            )
        return ObjectReader(
            iter(()), digest=digest, start=start, end=start, object_size=object_size, release=_noop
        )

    def _location(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"


def _object_size(content_range: str | None, content_length: int) -> int:
    """The whole object's size: from ``Content-Range: bytes a-b/size`` on a ranged response
    (RFC 9110 §14.4), else the response's own length."""
    if content_range is None:
        return content_length
    match = _CONTENT_RANGE.fullmatch(content_range.strip())
    if match is None:
        raise StorageError(f"expected Content-Range 'bytes a-b/size', got {content_range!r}")
    return int(match.group(3))


def _body_chunks(body: StreamingBody, location: str) -> Iterator[bytes]:
    try:
        yield from body.iter_chunks(CHUNK_SIZE)
    except (BotoCoreError, HTTPError, OSError) as exc:
        raise StorageError(f"reading {location} failed midway: {exc}") from exc


def _noop() -> None:
    return None
