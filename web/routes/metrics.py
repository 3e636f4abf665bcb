"""Metric series for charts: ``/api/v1/runs/{run}/metrics`` (downsampled server-side)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from web.deps import SHORT, ResourcesDep
from web.downsample import METHOD
from web.params import RunPath
from web.schemas import MetricsResponse

router = APIRouter(prefix="/api/v1", tags=["metrics"])

MAX_POINTS_LIMIT = 100_000


@router.get(
    "/runs/{run}/metrics",
    response_model=MetricsResponse,
    responses={404: {"description": "No such run."}},
    summary="Metric series of a run, downsampled for charts",
    description=(
        "One series per metric key (all keys, or the `key` parameters given; a key the run "
        "never recorded gives an empty series). With `max_points`, each series keeps at most "
        "that many points: the first and the last, and the minimum and maximum of each of "
        "`(max_points - 2) // 2` buckets of consecutive steps, so extremes and spikes "
        "survive. Without it, every point. The values repeat what each `outer_step` entry "
        "records under `metrics` (the signed record); `entries` names that entry."
    ),
)
def get_metrics(
    run: RunPath,
    resources: ResourcesDep,
    response: Response,
    key: Annotated[
        list[str] | None, Query(description="Metric key, e.g. `train_loss`; repeat for several.")
    ] = None,
    max_points: Annotated[
        int | None, Query(ge=2, le=MAX_POINTS_LIMIT, description="Most points per series.")
    ] = None,
) -> MetricsResponse:
    response.headers["Cache-Control"] = SHORT
    return MetricsResponse(
        run_id=run,
        max_points=max_points,
        method=METHOD if max_points is not None else "none",
        series=resources.series.series(resources.ledger, run, key, max_points),
    )
