"""What routes depend on: the app's long-lived resources, opened by the lifespan in
:mod:`web.app` and reached through FastAPI dependencies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from ledger.service import Ledger
from storage import ObjectStore
from web.audit_status import StatusCache
from web.hf_repo import RootIndex
from web.series import SeriesCache
from web.settings import WebSettings
from web.telemetry import Telemetry
from web.verified_files import VerifiedFiles

IMMUTABLE = "public, max-age=31536000, immutable"
"""Cache policy of content that can never change: objects, entries, proofs between fixed sizes."""
SHORT = "public, max-age=5"
"""Cache policy of what grows with the run: tree heads, run summaries, metrics, pages."""


@dataclass
class Resources:
    """The database engine (inside the ledger) and the store client of one app."""

    settings: WebSettings
    ledger: Ledger
    store: ObjectStore
    telemetry: Telemetry
    status: StatusCache
    """Audit results per (run, log size)."""
    series: SeriesCache
    """Chart series per (run, log size, keys, max_points)."""
    verified: VerifiedFiles
    roots: RootIndex
    """Manifest root -> outer step (the Hugging Face "commit" of a checkpoint)."""
    """Local object files hashed in full before a range of them is served."""


# The dependencies are ``async def`` although they do no I/O: FastAPI runs a plain ``def``
# dependency in its thread pool, and that hand-off costs more than the attribute lookups
# (measured on the inclusion-proof path: docs/benchmarks.md).


def _resources(request: Request) -> Resources:
    found: Resources = request.app.state.resources
    return found


async def resources(request: Request) -> Resources:
    return _resources(request)


async def ledger(request: Request) -> Ledger:
    return _resources(request).ledger


async def store(request: Request) -> ObjectStore:
    return _resources(request).store


LedgerDep = Annotated[Ledger, Depends(ledger)]
StoreDep = Annotated[ObjectStore, Depends(store)]
ResourcesDep = Annotated[Resources, Depends(resources)]
