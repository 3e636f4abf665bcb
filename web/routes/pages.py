"""The audit page: ``/`` (runs) and ``/runs/{run}`` (one run), server-rendered HTML."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from web.deps import SHORT, ResourcesDep
from web.errors import html_errors
from web.run_page import run_page
from web.run_records import run_state
from web.templating import render, script_json

router = APIRouter(tags=["pages"], dependencies=[Depends(html_errors)], include_in_schema=False)


@router.get("/")
def runs_page(request: Request, resources: ResourcesDep) -> Response:
    ledger = resources.ledger
    runs = [(run, run_state(ledger, run)) for run in ledger.list_runs()]
    return render(request, "runs.html", {"runs": runs}, headers={"Cache-Control": SHORT})


@router.get("/runs/{run}")
def run_view(
    run: str,
    request: Request,
    resources: ResourcesDep,
    page: Annotated[int, Query(ge=1, le=10**9)] = 1,
) -> Response:
    view = run_page(
        resources.ledger, resources.store, resources.status, resources.series, run, page
    )
    base_url = str(request.base_url).rstrip("/")
    context = {
        "view": view,
        "base_url": base_url,
        "chart_json": script_json(view.chart_data),
        "origin_prefix": resources.settings.origin,
    }
    return render(request, "run.html", context, headers={"Cache-Control": SHORT})
