"""The FastAPI application: ``create_app(settings)``.

The lifespan opens the ledger's database engine and the object-store client when the app
starts and closes them when it stops; routes reach them through :mod:`web.deps`. Routers
are included in a fixed order and the Hugging Face catch-all ``/{run}/resolve/...`` comes
last, after ``/api``, ``/docs``, ``/static``, the pages and the operations routes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from ledger.db import create_engine
from ledger.service import Ledger
from storage import open_store
from web.audit_status import StatusCache
from web.deps import Resources
from web.errors import install_error_handlers
from web.hf_repo import RootIndex
from web.http_methods import HttpMethodsMiddleware
from web.routes import checkpoints, hf, log, metrics, objects, ops, pages, runs, tiles
from web.security_headers import NoSniffMiddleware
from web.series import SeriesCache
from web.settings import WebSettings
from web.telemetry import Telemetry, TelemetryMiddleware
from web.vendor import plotly_bundle
from web.verified_files import VerifiedFiles

STATIC = Path(__file__).parent / "static"

DESCRIPTION = """\
Read-only API of a veritrain ledger: every training run is an append-only, Merkle-logged,
signed log (RFC 9162 hashing, C2SP tlog-checkpoint signed tree heads, C2SP tlog-proof
receipts), and every checkpoint, data shard and attestation document is a content-addressed
object. Hashes are lowercase hex. Invalid parameters are answered 422; unknown runs,
entries and objects 404. See docs/web.md.
"""


def create_app(settings: WebSettings) -> FastAPI:
    """The web app over the ledger at ``settings.database_url`` and the store at
    ``settings.store_url`` (opened when the app starts, closed when it stops)."""
    telemetry = Telemetry()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(settings.database_url)
        store = open_store(settings.store_url)
        app.state.resources = Resources(
            settings=settings,
            ledger=Ledger(engine),  # read-only: no origin, no log keys
            store=store,
            telemetry=telemetry,
            status=StatusCache(),
            series=SeriesCache(),
            verified=VerifiedFiles(),
            roots=RootIndex(),
        )
        plotly_bundle()  # read and compress once at start, not on the first page view
        try:
            yield
        finally:
            store.close()
            engine.dispose()

    app = FastAPI(
        title="veritrain",
        description=DESCRIPTION,
        version="1",
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    install_error_handlers(app)
    # Innermost: telemetry sees a HEAD answered as a GET as the one HEAD request it is.
    app.add_middleware(HttpMethodsMiddleware, routes=lambda: app.routes)
    app.add_middleware(TelemetryMiddleware, telemetry=telemetry)
    app.add_middleware(NoSniffMiddleware)
    routers = (
        runs.router,
        log.router,
        tiles.router,
        metrics.router,
        checkpoints.router,
        objects.router,
        ops.router,
        pages.router,
    )
    for router in routers:
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.include_router(hf.router)  # last: /{run}/resolve/... must not shadow anything above
    return app
