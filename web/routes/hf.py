"""Checkpoint files through the Hugging Face Hub download conventions:
``GET|HEAD /{run}/resolve/{revision}/{filename}``.

So ``huggingface_hub.hf_hub_download(repo_id=RUN, filename=..., revision="step-000012",
endpoint=URL)`` fetches a checkpoint file unmodified. What the client relies on
(huggingface_hub ``file_download.get_hf_file_metadata`` and ``http_get``):

- it sends ``HEAD`` first, without following redirects to another host, and reads
  ``X-Repo-Commit`` (required), ``X-Linked-Etag`` or ``ETag`` (required; a SHA-256 lets it
  check the file), ``X-Linked-Size`` or ``Content-Length``, and ``Location`` on a redirect;
- then ``GET`` at that location, resuming with ``Range`` after a broken connection;
- 404s carry ``X-Error-Code``: ``RepoNotFound``, ``RevisionNotFound`` or ``EntryNotFound``.

Here the repository is the run, a revision is an outer step (:mod:`web.revisions`), the
"commit" (``X-Repo-Commit``) is the step's checkpoint manifest root -- the digest the
ledger entry and the attestation statement name the checkpoint by -- and the file's ETag is
its SHA-256 from the manifest. With an S3 store and presigned downloads the answer is a 302
to the presigned URL, as the Hub redirects to its CDN.

Registered last, after ``/api``, ``/docs``, ``/static``, ``/runs`` and the rest, so no
run id can shadow them.
"""

from __future__ import annotations

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from web.deps import IMMUTABLE, SHORT, ResourcesDep
from web.downloads import object_response
from web.errors import NotFoundError
from web.hf_repo import refs as hf_refs
from web.hf_repo import revision as hf_revision
from web.ranges import entity_tag
from web.revisions import LATEST, hub_error
from web.schemas import ResponsesDoc

router = APIRouter(tags=["huggingface"])


RESPONSES: ResponsesDoc = {
    200: {"content": {"application/octet-stream": {}}, "description": "The file."},
    206: {"description": "The requested range(s)."},
    302: {"description": "Redirect to a presigned S3 URL."},
    404: {
        "description": (
            "No such run (RepoNotFound), step (RevisionNotFound) or file (EntryNotFound)."
        )
    },
    416: {"description": "No requested range overlaps the file."},
}
PATH = "/{run}/resolve/{revision}/{filename:path}"


@router.get(
    PATH,
    response_class=Response,
    responses=RESPONSES,
    summary="A checkpoint file, Hugging Face Hub style",
    operation_id="resolve_file",
)
@router.head(
    PATH,
    response_class=Response,
    responses=RESPONSES,
    summary="Headers of a checkpoint file, Hugging Face Hub style",
    operation_id="resolve_file_head",
)
def resolve(
    run: str,
    filename: str,
    request: Request,
    resources: ResourcesDep,
    revision: str = Path(
        description="`step-000012`, `latest`, `main`, or a checkpoint's manifest root."
    ),
) -> Response:
    found = hf_revision(resources.ledger, resources.store, resources.roots, run, revision)
    commit = {"X-Repo-Commit": found.commit}
    digest = found.files.get(filename)
    if digest is None:
        raise NotFoundError(
            f"run {run!r} step {found.ref.step}: no file {filename!r} "
            f"in the checkpoint; expected one of {sorted(found.files)}",
            headers=hub_error("EntryNotFound", "Entry not found") | commit,
        )
    store = resources.store
    headers = commit | {
        "X-Linked-Etag": entity_tag(digest),
        "X-Linked-Size": str(store.size(digest)),
    }
    # A step's files never change; "latest" moves on as the run records new steps.
    immutable = revision not in LATEST
    return object_response(
        request,
        store,
        digest,
        presign=resources.settings.s3_presign_downloads,
        verified=resources.verified,
        cache_control=IMMUTABLE if immutable else SHORT,
        headers=headers,
        filename=filename,
    )


@router.get(
    "/api/models/{run}/revision/{revision}",
    summary="A revision's repository info, Hugging Face Hub style",
    operation_id="model_info",
    responses={404: {"description": "No such run or revision."}},
)
def model_info(run: str, revision: str, resources: ResourcesDep) -> JSONResponse:
    """What ``huggingface_hub``'s ``repo_info`` reads: the revision's "commit" (the checkpoint's
    manifest root, which pins every file of a ``snapshot_download``) and its files."""
    found = hf_revision(resources.ledger, resources.store, resources.roots, run, revision)
    body = {
        "id": run,
        "modelId": run,
        "sha": found.commit,
        "siblings": [{"rfilename": name} for name in sorted(found.files)],
    }
    cache = SHORT if revision in LATEST else IMMUTABLE
    return JSONResponse(body, headers={"Cache-Control": cache})


@router.get(
    "/api/models/{run}/tree/{revision}",
    summary="A revision's files, Hugging Face Hub style",
    operation_id="model_tree",
    responses={404: {"description": "No such run or revision."}},
)
def model_tree(run: str, revision: str, resources: ResourcesDep) -> JSONResponse:
    """What ``huggingface_hub``'s ``list_repo_tree`` reads: every file with its size and an
    object id (here its SHA-256). A checkpoint has no folders, so the listing is flat."""
    found = hf_revision(resources.ledger, resources.store, resources.roots, run, revision)
    store = resources.store
    body = [
        {"type": "file", "path": name, "size": store.size(digest), "oid": digest}
        for name, digest in sorted(found.files.items())
    ]
    cache = SHORT if revision in LATEST else IMMUTABLE
    return JSONResponse(body, headers={"Cache-Control": cache})


@router.get(
    "/api/models/{run}/refs",
    summary="A run's revisions as git refs, Hugging Face Hub style",
    operation_id="model_refs",
    responses={404: {"description": "No such run."}},
)
def model_refs(
    run: str,
    resources: ResourcesDep,
    include_prs: bool = Query(False, description="Also list pull requests (a run has none)."),
) -> JSONResponse:
    """What ``huggingface_hub``'s ``list_repo_refs`` reads: every recorded step as a tag
    (``step-000012``), ``main`` and ``latest`` as branches at the newest step; each ref's
    ``targetCommit`` is the checkpoint's manifest root (the revision ``resolve`` accepts)."""
    found = hf_refs(resources.ledger, run)

    def listed(names: dict[str, str], kind: str) -> list[dict[str, str]]:
        return [
            {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": commit}
            for name, commit in names.items()
        ]

    body: dict[str, list[dict[str, str]]] = {
        "branches": listed(found.branches, "heads"),
        "converts": [],
        "tags": listed(found.tags, "tags"),
    }
    if include_prs:
        body["pullRequests"] = []
    return JSONResponse(body, headers={"Cache-Control": SHORT})  # moves as the run grows
