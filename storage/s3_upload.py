"""Write-once upload of a stream to one S3 key, committed only after the caller's check.

Small objects (one part) go up with a single PutObject; larger ones as a multipart upload
of ``part_size`` parts, so memory stays at about two parts whatever the object's size. Both
commits carry ``If-None-Match: *`` (conditional writes, supported by AWS S3 since 2024-08
and by SeaweedFS), so an existing key is never replaced: S3 answers 412 Precondition Failed
and we raise :class:`ObjectExistsError`. ``before_commit`` runs after the last byte was
sent and before the object becomes visible: the store uses it to check the SHA-256, so a
stream that does not hash to its key never appears under it. Any failure -- the check, the
source, the network -- aborts the multipart upload, so no parts are left billed and hidden.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from storage.errors import StorageError
from storage.s3_errors import s3_errors

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

MIN_PART_SIZE = 5 << 20
"""S3's smallest part except the last (AWS S3 multipart upload limits)."""
MAX_PARTS = 10_000
"""S3's largest part number."""


def upload_once(
    client: S3Client,
    *,
    bucket: str,
    key: str,
    chunks: Iterable[bytes],
    part_size: int,
    before_commit: Callable[[int], None],
) -> int:
    """Upload the chunks to ``s3://bucket/key`` unless the key exists; return the size.

    ``before_commit(size)`` is called once all bytes are sent; if it raises, nothing is
    committed. Raises :class:`ObjectExistsError` if the key already holds an object.
    """
    if part_size < MIN_PART_SIZE:
        raise StorageError(f"expected part_size >= {MIN_PART_SIZE} (S3 minimum), got {part_size}")
    location = f"s3://{bucket}/{key}"
    parts = _parts(chunks, part_size)
    first, last = next(parts)
    if last:
        before_commit(len(first))
        with s3_errors("PutObject", location):
            client.put_object(Bucket=bucket, Key=key, Body=first, IfNoneMatch="*")
        return len(first)

    with s3_errors("CreateMultipartUpload", location):
        upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    try:
        completed: list[CompletedPartTypeDef] = []
        size = 0
        number = 0
        body: bytes | None = first
        del first  # only `body` may keep a part alive, so memory stays at about two parts
        while body is not None:
            number += 1
            if number > MAX_PARTS:
                raise StorageError(
                    f"expected at most {MAX_PARTS} parts of {part_size} bytes for {location}, "
                    f"got more: raise part_size"
                )
            with s3_errors("UploadPart", location):
                etag = client.upload_part(
                    Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
                )["ETag"]
            completed.append({"PartNumber": number, "ETag": etag})
            size += len(body)
            body = None
            if not last:
                body, last = next(parts)
        before_commit(size)
        with s3_errors("CompleteMultipartUpload", location):
            client.complete_multipart_upload(
                Bucket=bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": completed},
                IfNoneMatch="*",
            )
    except BaseException as exc:
        _abort(client, bucket, key, upload_id, exc)
        raise
    return size


def _abort(client: S3Client, bucket: str, key: str, upload_id: str, cause: BaseException) -> None:
    # An abort that fails must not hide the original error; note it on that error instead.
    try:
        with s3_errors("AbortMultipartUpload", f"s3://{bucket}/{key}"):
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
    except StorageError as abort_error:
        cause.add_note(f"also failed to abort upload {upload_id}: {abort_error}")


def _parts(chunks: Iterable[bytes], part_size: int) -> Iterator[tuple[bytes, bool]]:
    """Re-cut the chunks into parts of ``part_size`` bytes (the last may be shorter, and is
    empty for an empty stream), each with whether it is the last. A part is handed out only
    once a byte beyond it has arrived, so "last" is known without reading a whole part ahead.
    """
    buffer = bytearray()
    for chunk in chunks:
        buffer += chunk
        while len(buffer) > part_size:
            with memoryview(buffer) as view:
                part = view[:part_size].tobytes()
            del buffer[:part_size]
            yield part, False
            del part  # the consumer has sent it; do not keep it alive while filling the next
    yield bytes(buffer), True
