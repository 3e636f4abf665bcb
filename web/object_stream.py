"""Streaming an object's bytes out of the store through the app (the S3 proxy path).

Used when the store has no local file to hand to ``FileResponse`` and downloads are not
redirected to presigned URLs. Memory stays flat: the store's reader yields chunks of at most
1 MiB and each is sent before the next is read. A whole-object read is verified against its
digest as it streams (``storage.reader`` raises after the last chunk instead of ending), and
the last chunk is held back until that check has passed: if the stored bytes are corrupt,
the connection is dropped short of ``Content-Length``, so a client never completes a bad
download.

Several ranges are sent as ``multipart/byteranges`` (RFC 9110 §14.6, RFC 2046 §5.1.1):

    --BOUNDARY CRLF Content-Type: T CRLF Content-Range: bytes a-b/size CRLF CRLF <bytes> CRLF
    ... one part per range ...
    --BOUNDARY--
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator, Mapping, Sequence

from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from storage import ObjectStore
from storage.errors import IntegrityError
from web.ranges import ByteRange

OCTET_STREAM = "application/octet-stream"
LOG = logging.getLogger("veritrain.web")


def stream_response(
    store: ObjectStore,
    digest: str,
    *,
    size: int,
    ranges: Sequence[ByteRange] | None,
    headers: Mapping[str, str],
    head_only: bool,
) -> Response:
    """A 200 (``ranges`` None) or 206 response streaming ``digest`` from ``store``.
    ``head_only`` sends the same status and headers with no body and opens nothing."""
    out = dict(headers)
    if ranges is None:
        status, media_type = 200, OCTET_STREAM
        out["Content-Length"] = str(size)
        body: Iterator[bytes] = _read(store, digest, None) if not head_only else iter(())
    elif len(ranges) == 1:
        status, media_type = 206, OCTET_STREAM
        out["Content-Length"] = str(ranges[0].length)
        out["Content-Range"] = ranges[0].content_range(size)
        body = _read(store, digest, ranges[0]) if not head_only else iter(())
    else:
        status = 206
        boundary = secrets.token_hex(13)
        media_type = f"multipart/byteranges; boundary={boundary}"
        heads = [_part_head(boundary, r, size) for r in ranges]
        tail = f"--{boundary}--".encode("ascii")
        length = sum(len(h) + r.length + 2 for h, r in zip(heads, ranges, strict=True)) + len(tail)
        out["Content-Length"] = str(length)
        body = _multipart(store, digest, ranges, heads, tail) if not head_only else iter(())
    if head_only:
        return Response(status_code=status, headers=out, media_type=media_type)
    response = StreamingResponse(body, status_code=status, headers=out, media_type=media_type)
    response.background = BackgroundTask(_close, body)
    return response


def _read(store: ObjectStore, digest: str, byte_range: ByteRange | None) -> Iterator[bytes]:
    start, end = (None, None) if byte_range is None else (byte_range.start, byte_range.end)
    with store.open(digest, start, end) as reader:
        held: bytes | None = None
        try:
            for chunk in reader:  # ends only once a whole read has verified
                if held is not None:
                    yield held
                held = chunk
        except IntegrityError as exc:
            LOG.error("refused to finish serving object sha256/%s: %s", digest, exc)
            raise
        if held is not None:
            yield held


def verify_or_log(store: ObjectStore, digest: str) -> None:
    """Hash the whole stored object (:class:`IntegrityError` if it is not what its digest
    names, after logging which object)."""
    try:
        store.verify(digest)
    except IntegrityError as exc:
        LOG.error("object sha256/%s failed verification: %s", digest, exc)
        raise


def _multipart(
    store: ObjectStore,
    digest: str,
    ranges: Sequence[ByteRange],
    heads: Sequence[bytes],
    tail: bytes,
) -> Iterator[bytes]:
    for head, byte_range in zip(heads, ranges, strict=True):
        yield head
        yield from _read(store, digest, byte_range)
        yield b"\r\n"
    yield tail


def _part_head(boundary: str, byte_range: ByteRange, size: int) -> bytes:
    return (
        f"--{boundary}\r\nContent-Type: {OCTET_STREAM}\r\n"
        f"Content-Range: {byte_range.content_range(size)}\r\n\r\n"
    ).encode("ascii")


def _close(body: Iterator[bytes]) -> None:
    # A client that disconnects mid-download leaves the generator suspended; closing it runs
    # the reader's ``with`` block, which releases the S3 connection.
    close = getattr(body, "close", None)
    if close is not None:
        close()
