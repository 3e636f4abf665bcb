"""Content-addressed downloads: ``GET|HEAD /api/v1/objects/{sha256}``."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from web.deps import IMMUTABLE, ResourcesDep
from web.downloads import object_response
from web.params import Sha256Path
from web.schemas import ResponsesDoc

router = APIRouter(prefix="/api/v1", tags=["objects"])

RESPONSES: ResponsesDoc = {
    200: {"content": {"application/octet-stream": {}}, "description": "The whole object."},
    206: {"description": "The requested range(s); several ranges as multipart/byteranges."},
    302: {"description": "Redirect to a presigned S3 URL (S3 store with presigned downloads)."},
    304: {"description": "If-None-Match named the object's ETag."},
    404: {"description": "No object with this digest."},
    416: {"description": "No requested range overlaps the object; Content-Range: bytes */size."},
    422: {"description": "The digest is not 64 lowercase hex characters."},
}


DESCRIPTION = (
    "Objects are immutable: `ETag` is the quoted SHA-256 and the answer may be cached "
    "forever. Supports `Range` (single and multiple byte ranges), `If-Range` (with the "
    "ETag) to resume a download safely, and `If-None-Match`. A ranged read is not verified "
    "by the server (SHA-256 is not a tree hash): check the SHA-256 of the assembled file."
)


@router.get(
    "/objects/{sha256}",
    response_class=Response,
    responses=RESPONSES,
    summary="Download an object by its SHA-256",
    description=DESCRIPTION,
    operation_id="get_object",
)
@router.head(
    "/objects/{sha256}",
    response_class=Response,
    responses=RESPONSES,
    summary="Headers of an object download",
    description=DESCRIPTION,
    operation_id="head_object",
)
def get_object(sha256: Sha256Path, request: Request, resources: ResourcesDep) -> Response:
    return object_response(
        request,
        resources.store,
        sha256,
        presign=resources.settings.s3_presign_downloads,
        verified=resources.verified,
        cache_control=IMMUTABLE,
    )
