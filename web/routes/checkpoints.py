"""A step's checkpoint manifest: ``/api/v1/runs/{run}/steps/{t}/checkpoint``."""

from __future__ import annotations

import json
from urllib.parse import quote

from fastapi import APIRouter, Response

from web.deps import IMMUTABLE, LedgerDep, StoreDep
from web.params import RunPath, StepPath
from web.revisions import revision_name
from web.run_records import checkpoint_ref, load_manifest
from web.schemas import CheckpointFile, CheckpointInfo

router = APIRouter(prefix="/api/v1", tags=["checkpoints"])


@router.get(
    "/runs/{run}/steps/{t}/checkpoint",
    response_model=CheckpointInfo,
    responses={
        404: {"description": "No such run or step."},
        502: {"description": "The stored manifest does not match its entry."},
    },
    summary="Checkpoint manifest of an outer step",
    description=(
        "The manifest the step's `outer_step` entry names, fetched from the store, verified "
        "against its digest and checked to have the recorded root; with every file's digest, "
        "size and download URLs."
    ),
)
def get_checkpoint(
    run: RunPath, t: StepPath, ledger: LedgerDep, store: StoreDep, response: Response
) -> CheckpointInfo:
    ref = checkpoint_ref(ledger, run, t)
    manifest = load_manifest(store, ref)
    revision = revision_name(t)
    files = [
        CheckpointFile(
            name=entry.name,
            digest=entry.digest,
            size=store.size(entry.digest),
            url=f"/api/v1/objects/{entry.digest}",
            resolve_url=f"/{run}/resolve/{revision}/{quote(entry.name)}",
        )
        for entry in manifest.entries
    ]
    response.headers["Cache-Control"] = IMMUTABLE
    return CheckpointInfo(
        run_id=run,
        step=t,
        entry_index=ref.entry_index,
        manifest_root=ref.manifest_root,
        manifest_object=ref.manifest_object,
        manifest=json.loads(manifest.to_json()),
        files=files,
    )
