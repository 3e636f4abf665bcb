"""A run as a Hugging Face model repository: its revisions and the files of each.

A revision is an outer step's checkpoint: ``step-000012``, ``main``/``latest`` (the newest
step, from the signed log), or the checkpoint's "commit" -- its manifest root, which is what
``huggingface_hub`` pins a download to after asking for a revision's info. A revision's files
are the checkpoint manifest's files (model shards and index, config.json,
generation_config.json, tokenizer files, optimizer and trainer state) plus ``model.sig``, the
OpenSSF model-signing signature over them (veritrain/model_signature.py in the recorder).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

from ledger.errors import EntryNotFoundError, RunNotFoundError
from ledger.service import Ledger
from records import KIND_OUTER_STEP, OuterStep
from storage import ObjectStore
from web.errors import NotFoundError, UnreadableRunError
from web.revisions import LATEST, hub_error, parse_revision, revision_name
from web.run_records import (
    CheckpointRef,
    checkpoint_ref,
    load_manifest,
    read_record,
    run_state,
    step_record,
)

SIGNATURE_FILE = "model.sig"
_ROOT = re.compile(r"[0-9a-f]{64}")
CACHE_ROOTS = 4096


@dataclass(frozen=True)
class Revision:
    """One checkpoint as a repository revision: its files by name -> object digest."""

    ref: CheckpointRef
    files: dict[str, str]

    @property
    def commit(self) -> str:
        return self.ref.manifest_root


class RootIndex:
    """Manifest root -> outer step, per run: filled by one scan of a run's entries, then
    extended as the run grows (a root never moves, so an answer is never stale)."""

    def __init__(self, capacity: int = CACHE_ROOTS) -> None:
        self._steps: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._scanned: dict[str, int] = {}
        self._capacity = capacity
        self._lock = threading.Lock()

    def step(self, ledger: Ledger, run_id: str, root: str) -> int | None:
        with self._lock:
            if (run_id, root) in self._steps:
                return self._steps[(run_id, root)]
            start = self._scanned.get(run_id, 0)
        found: dict[str, int] = {}
        while page := ledger.entries(run_id, start, 1000):
            for entry in page:
                if entry.kind == KIND_OUTER_STEP:
                    record = read_record(entry)
                    if isinstance(record, OuterStep):
                        found[record.checkpoint.manifest_root] = record.step
            start += len(page)
        with self._lock:
            for key, step in found.items():
                self._steps[(run_id, key)] = step
            while len(self._steps) > self._capacity:
                self._steps.popitem(last=False)
            self._scanned[run_id] = max(start, self._scanned.get(run_id, 0))
            return self._steps.get((run_id, root))


@dataclass(frozen=True)
class RepoRefs:
    """A run's revisions as git refs (what ``huggingface_hub.list_repo_refs`` reads): each
    recorded step is a tag ``step-000012``, fixed forever; ``main`` and ``latest`` are
    branches that move to the newest step. Every ref's "commit" is that checkpoint's manifest
    root."""

    tags: dict[str, str]
    """``step-000012`` -> manifest root, in step order."""
    branches: dict[str, str]
    """``main``/``latest`` -> the newest step's manifest root (none before the first step)."""


def refs(ledger: Ledger, run_id: str) -> RepoRefs:
    """Every checkpoint revision of run ``run_id``, from one pass over its signed entries
    (404 ``RepoNotFound`` for an unknown run)."""
    try:
        size = ledger.get_run(run_id).size
        roots: dict[int, str] = {}
        start = 0
        while start < size and (page := ledger.entries(run_id, start, 1000)):
            for entry in page:
                if entry.kind == KIND_OUTER_STEP:
                    record = read_record(entry)
                    if isinstance(record, OuterStep):
                        roots[record.step] = record.checkpoint.manifest_root
            start += len(page)
    except RunNotFoundError as exc:
        raise NotFoundError(
            str(exc), headers=hub_error("RepoNotFound", "Repository not found")
        ) from exc
    tags = {revision_name(step): roots[step] for step in sorted(roots)}
    newest = roots[max(roots)] if roots else None
    branches = {name: newest for name in LATEST} if newest is not None else {}
    return RepoRefs(tags=tags, branches=branches)


def revision(
    ledger: Ledger, store: ObjectStore, roots: RootIndex, run_id: str, name: str
) -> Revision:
    """The checkpoint ``name`` names in run ``run_id`` (404s carry the Hub's error codes)."""
    try:
        step = _step(ledger, roots, run_id, name)
        ref = checkpoint_ref(ledger, run_id, step)
        _, record = step_record(ledger, run_id, step)
    except RunNotFoundError as exc:
        raise NotFoundError(
            str(exc), headers=hub_error("RepoNotFound", "Repository not found")
        ) from exc
    except EntryNotFoundError as exc:
        raise NotFoundError(
            str(exc), headers=hub_error("RevisionNotFound", "Invalid revision")
        ) from exc
    files = dict(load_manifest(store, ref).digests)
    files[SIGNATURE_FILE] = record.checkpoint.signature_object
    return Revision(ref=ref, files=files)


def _step(ledger: Ledger, roots: RootIndex, run_id: str, name: str) -> int:
    if _ROOT.fullmatch(name):
        ledger.get_run(run_id)  # RunNotFoundError first
        step = roots.step(ledger, run_id, name)
        if step is None:
            raise EntryNotFoundError(f"run {run_id!r} has no checkpoint with manifest root {name}")
        return step
    step = parse_revision(name)
    if step is not None:
        return step
    state = run_state(ledger, ledger.get_run(run_id))
    if state.problem is not None:
        raise UnreadableRunError(f"run {run_id!r}: the latest step cannot be told: {state.problem}")
    if state.latest_step is None:
        raise EntryNotFoundError(f"run {run_id!r} has no outer step yet, so no checkpoint")
    return state.latest_step
