"""Operations: ``/healthz``, Prometheus ``/metrics``, and the vendored Plotly bundle."""

from __future__ import annotations

from functools import cache

import sqlalchemy as sa
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from ledger import db
from storage.errors import StorageError
from web.deps import IMMUTABLE, Resources, ResourcesDep
from web.errors import NotFoundError
from web.schemas import Health
from web.vendor import VENDOR_PREFIX, plotly_bundle

router = APIRouter(tags=["operations"])


@router.get(
    "/healthz",
    response_model=Health,
    responses={503: {"description": "The database or the store cannot be reached."}},
    summary="Liveness and readiness",
)
def healthz(resources: ResourcesDep) -> JSONResponse:
    # Ready means: the ledger database is reachable and at the schema this code expects, and
    # the store answers a lookup (of a digest that does not exist: cheap on both back-ends,
    # and it exercises S3 credentials).
    database, store = _database_state(resources), "ok"
    try:
        resources.store.exists("0" * 64)
    except (StorageError, OSError) as exc:
        store = f"error: {exc.__class__.__name__}: {exc}"
    ok = database == store == "ok"
    body = Health(status="ok" if ok else "unavailable", database=database, store=store)
    return JSONResponse(
        body.model_dump(), status_code=200 if ok else 503, headers={"Cache-Control": "no-store"}
    )


def _database_state(resources: Resources) -> str:
    url = resources.settings.database_url
    if db.sqlite_file_missing(url):  # checked first: connecting would create an empty file
        return f"error: no ledger database at {db.display_url(url)}; run `veritrain db upgrade`"
    try:
        revision = db.current_revision(resources.ledger.engine)
    except sa.exc.SQLAlchemyError as exc:
        return f"error: {exc.__class__.__name__}"
    heads = _head_revisions()
    if revision not in heads:
        return (
            f"error: schema at revision {revision}, expected "
            f"{', '.join(heads)}; run `veritrain db upgrade`"
        )
    return "ok"


@cache
def _head_revisions() -> tuple[str, ...]:
    return db.head_revisions()


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus metrics",
    responses={200: {"content": {"text/plain": {}}}},
)
def prometheus_metrics(resources: ResourcesDep) -> Response:
    body, content_type = resources.telemetry.exposition()
    return Response(body, media_type=content_type, headers={"Cache-Control": "no-store"})


@router.get(VENDOR_PREFIX + "{name}", include_in_schema=False)
def vendor_asset(name: str, request: Request) -> Response:
    bundle = plotly_bundle()
    if name != bundle.name:
        raise NotFoundError(f"no vendored asset {name!r}; expected {bundle.url}")
    headers = {"Cache-Control": IMMUTABLE, "Vary": "Accept-Encoding"}
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return Response(bundle.gzipped, media_type="text/javascript", headers=headers)
    return Response(bundle.body, media_type="text/javascript", headers=headers)
