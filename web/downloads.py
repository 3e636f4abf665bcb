"""Answering a download of one content-addressed object, for every back-end.

One function, :func:`object_response`, serves ``GET|HEAD /api/v1/objects/{sha256}`` and the
Hugging Face ``resolve`` route. It decides the conditional and range questions once
(:mod:`web.ranges`) and then hands the bytes over in the cheapest way the store allows:

1. ``If-None-Match`` naming the object's tag -> 304 (no bytes);
2. an S3 store with ``s3_presign_downloads`` -> 302 to a presigned GET URL (S3 itself then
   serves Range requests; the client checks the SHA-256 the ``ETag`` names);
3. a range of a local object -> Starlette's ``FileResponse`` (zero-copy where the server
   supports ``http.response.pathsend``, single and multiple ranges), given a canonical
   ``Range``, once the whole file has hashed to its digest (:mod:`web.verified_files`);
4. otherwise -> a stream through the app (:mod:`web.object_stream`), verified against the
   digest as it goes: a corrupt object is never sent whole.

Every answer carries ``ETag: "<sha256>"``, ``Accept-Ranges: bytes`` and the caller's cache
policy. The digest has been validated by the route (64 lowercase hex) before it gets here,
and storage validates it again before building any path or key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.types import Receive, Scope, Send

from storage import ObjectStore
from web.object_stream import OCTET_STREAM, stream_response, verify_or_log
from web.ranges import entity_tag, if_none_match_hits, range_header_value, requested_ranges
from web.verified_files import VerifiedFiles, file_identity

PRESIGN_SECONDS = 3600
"""Lifetime of a presigned download URL."""


def object_response(
    request: Request,
    store: ObjectStore,
    digest: str,
    *,
    presign: bool,
    cache_control: str,
    verified: VerifiedFiles,
    headers: Mapping[str, str] | None = None,
    filename: str | None = None,
) -> Response:
    """The response to a GET or HEAD of object ``digest`` (raises ``ObjectNotFoundError``
    for an unknown one). ``headers`` are added to every answer (e.g. the Hugging Face
    ``X-Repo-Commit``); ``filename`` adds a ``Content-Disposition``."""
    size = store.size(digest)
    etag = entity_tag(digest)
    common = {"ETag": etag, "Cache-Control": cache_control, "Accept-Ranges": "bytes"}
    common.update(headers or {})
    if filename is not None:
        common["Content-Disposition"] = f'attachment; filename="{filename}"'

    if if_none_match_hits(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers=common)

    if presign:
        url = store.presigned_url(digest, PRESIGN_SECONDS)
        if url is not None:
            return RedirectResponse(url, status_code=302, headers=common)

    ranges = requested_ranges(
        request.headers.get("range"), request.headers.get("if-range"), size=size, etag=etag
    )
    head_only = request.method == "HEAD"
    path = store.local_path(digest)
    if path is not None and ranges is not None and not head_only:
        if not verified.holds(digest, path):
            identity = file_identity(path)
            verify_or_log(store, digest)
            verified.remember(digest, identity)
        response = _CanonicalRangeFileResponse(
            path,
            range_header=range_header_value(ranges),
            headers=common,
            media_type=OCTET_STREAM,
            stat_result=os.stat(path),
        )
        # Objects are validated by their tag only: a Last-Modified date would invite date
        # validators, which If-Range must not honour for a copy we cannot date (§13.1.5).
        del response.headers["last-modified"]
        return response
    return stream_response(
        store, digest, size=size, ranges=ranges, headers=common, head_only=head_only
    )


class _CanonicalRangeFileResponse(FileResponse):
    """``FileResponse`` that sees the Range decision of :mod:`web.ranges`, not the raw
    request: the ``Range`` header is replaced by the canonical satisfiable ranges (or
    removed, for a whole-object answer) and ``If-Range`` is removed, so the local and S3
    paths answer every request the same way. Starlette then does the byte serving: 206 with
    ``Content-Range``, ``multipart/byteranges`` for several ranges, HEAD without a body."""

    def __init__(
        self, path: str | os.PathLike[str], *, range_header: str | None, **kwargs: object
    ) -> None:
        super().__init__(path, **kwargs)  # type: ignore[arg-type]
        self._range_header = range_header

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = [(k, v) for k, v in scope["headers"] if k not in (b"range", b"if-range")]
        if self._range_header is not None:
            raw.append((b"range", self._range_header.encode("ascii")))
        await super().__call__({**scope, "headers": raw}, receive, send)
