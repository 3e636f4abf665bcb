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

from fastapi import APIRouter, Path, Request, Response

from ledger.errors import EntryNotFoundError, RunNotFoundError
from web.deps import IMMUTABLE, SHORT, ResourcesDep
from web.downloads import object_response
from web.errors import NotFoundError, UnreadableRunError
from web.ranges import entity_tag
from web.revisions import LATEST, hub_error, parse_revision
from web.run_records import checkpoint_ref, file_digest, load_manifest, run_state
from web.schemas import ResponsesDoc

router = APIRouter(tags=["huggingface"])


RESPONSES: ResponsesDoc = {
    200: {"content": {"application/octet-stream": {}}, "description": "The file."},
    206: {"description": "The requested range(s)."},
    302: {"description": "Redirect to a presigned S3 URL."},
    404: {"description": "No such run (RepoNotFound), step (RevisionNotFound) or file (EntryNotFound)."},
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
    revision: str = Path(description="`step-000012`, `latest` or `main`."),
) -> Response:
    ledger, store = resources.ledger, resources.store
    step = parse_revision(revision)
    try:
        if step is None:
            state = run_state(ledger, ledger.get_run(run))
            if state.problem is not None:
                raise UnreadableRunError(f"run {run!r}: the latest step cannot be told: {state.problem}")
            step = state.latest_step
            if step is None:
                raise NotFoundError(
                    f"run {run!r} has no outer step yet, so no checkpoint",
                    headers=hub_error("RevisionNotFound", "Invalid revision"),
                )
        ref = checkpoint_ref(ledger, run, step)
    except RunNotFoundError as exc:
        raise NotFoundError(str(exc), headers=hub_error("RepoNotFound", "Repository not found")) from exc
    except EntryNotFoundError as exc:
        raise NotFoundError(str(exc), headers=hub_error("RevisionNotFound", "Invalid revision")) from exc
    manifest = load_manifest(store, ref)
    commit = {"X-Repo-Commit": ref.manifest_root}
    try:
        digest = file_digest(manifest, ref, filename)
    except NotFoundError as exc:
        exc.headers.update(hub_error("EntryNotFound", "Entry not found") | commit)
        raise
    headers = commit | {"X-Linked-Etag": entity_tag(digest), "X-Linked-Size": str(store.size(digest))}
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
