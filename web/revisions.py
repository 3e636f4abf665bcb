"""Revision names of the Hugging Face ``resolve`` route: a run is a "repository" whose
revisions are its outer steps.

``step-000012`` (any number of digits is accepted, six are written) names the checkpoint
written by outer step 12 (steps are 0-based, docs/records.md); ``latest`` -- and ``main``,
the revision ``huggingface_hub`` asks for when given none -- the newest recorded step.
"""

from __future__ import annotations

import re

from web.errors import NotFoundError

LATEST = ("latest", "main")
_STEP = re.compile(r"step-(\d{1,12})")


def revision_name(step: int) -> str:
    """The revision name of an outer step: ``step-000012``."""
    return f"step-{step:06d}"


def parse_revision(revision: str) -> int | None:
    """The outer step ``revision`` names, or None for the latest; :class:`NotFoundError`
    (answered 404 with ``X-Error-Code: RevisionNotFound``) for anything else."""
    if revision in LATEST:
        return None
    match = _STEP.fullmatch(revision)
    if match is None:
        raise NotFoundError(
            "expected a revision like 'step-000012', 'latest', "
            f"'main' or a checkpoint's manifest root, got {revision!r}",
            headers=hub_error("RevisionNotFound", "Invalid revision"),
        )
    return int(match.group(1))


def hub_error(code: str, message: str) -> dict[str, str]:
    """The headers by which ``huggingface_hub`` tells a missing repo, revision and file
    apart (``X-Error-Code``: RepoNotFound, RevisionNotFound, EntryNotFound)."""
    return {"X-Error-Code": code, "X-Error-Message": message}
