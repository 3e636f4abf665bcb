"""Runs and their entries: ``/api/v1/runs``, ``/runs/{run}``, ``/entries``, receipts."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.responses import PlainTextResponse

from ledger.records import EntryRecord, RunInfo
from ledger.service import MAX_PAGE, Ledger
from web.deps import IMMUTABLE, SHORT, LedgerDep
from web.params import MAX_INT64, IndexPath, RunPath, SizeQuery
from web.run_records import run_state
from web.schemas import (
    EntryInfo,
    EntryPage,
    KeyInfo,
    ResponsesDoc,
    RunDetail,
    RunList,
    RunSummary,
    TreeHeadInfo,
)

router = APIRouter(prefix="/api/v1", tags=["runs"])

NOT_FOUND: ResponsesDoc = {404: {"description": "No such run or entry."}}
BAD_RANGE: ResponsesDoc = {400: {"description": "Index or size outside the log."}}
DEFAULT_PAGE = 100


@router.get("/runs", response_model=RunList, summary="Every run, newest first")
def list_runs(ledger: LedgerDep, response: Response) -> RunList:
    response.headers["Cache-Control"] = SHORT
    return RunList(runs=[run_summary(ledger, run) for run in ledger.list_runs()])


@router.get(
    "/runs/{run}",
    response_model=RunDetail,
    responses=NOT_FOUND,
    summary="One run, its latest signed tree head and keys",
)
def get_run(run: RunPath, ledger: LedgerDep, response: Response) -> RunDetail:
    info = ledger.get_run(run)
    head = ledger.tree_head_at(run, info.size)
    keys = [
        KeyInfo(role=k.role, name=k.name, key_id=k.key_id, vkey=k.vkey) for k in ledger.keys(run)
    ]
    response.headers["Cache-Control"] = SHORT
    return RunDetail(
        **run_summary(ledger, info).model_dump(),
        tree_head=TreeHeadInfo(size=head.size, root_hash=head.root_hash.hex(), note=head.note),
        keys=keys,
    )


@router.get(
    "/runs/{run}/entries",
    response_model=EntryPage,
    responses=NOT_FOUND,
    summary="A page of entries in index order",
    description=(
        "Entries `start` .. `start + limit - 1` (fewer at the end of the log). Follow "
        "`next_start` until it is null to read the whole log. A full page never changes and "
        "is cached as immutable."
    ),
)
def list_entries(
    run: RunPath,
    ledger: LedgerDep,
    response: Response,
    start: Annotated[int, Query(ge=0, le=MAX_INT64, description="First entry index.")] = 0,
    limit: Annotated[
        int, Query(ge=1, le=MAX_PAGE, description=f"Entries per page, at most {MAX_PAGE}.")
    ] = DEFAULT_PAGE,
) -> EntryPage:
    size = ledger.get_run(run).size
    records = ledger.entries(run, start, limit) if start < size else []
    end = start + len(records)
    size = max(size, end)  # an append may have landed between the two reads
    response.headers["Cache-Control"] = IMMUTABLE if len(records) == limit else SHORT
    return EntryPage(
        run_id=run,
        start=start,
        limit=limit,
        size=size,
        next_start=end if end < size else None,
        entries=[entry_info(r) for r in records],
    )


@router.get(
    "/runs/{run}/entries/{index}",
    response_model=EntryInfo,
    responses=NOT_FOUND,
    summary="One entry",
)
def get_entry(run: RunPath, index: IndexPath, ledger: LedgerDep, response: Response) -> EntryInfo:
    record = ledger.entry(run, index)
    response.headers["Cache-Control"] = IMMUTABLE
    return entry_info(record)


@router.get(
    "/runs/{run}/entries/{index}/receipt",
    response_class=PlainTextResponse,
    responses={
        **NOT_FOUND,
        **BAD_RANGE,
        200: {"content": {"text/plain": {}}, "description": "C2SP tlog-proof@v1 text."},
    },
    summary="Offline receipt for one entry (C2SP tlog-proof@v1)",
    description=(
        "The inclusion proof of the entry in the tree of `size` entries (default: the "
        "latest) followed by that signed checkpoint. Verify offline with the entry body and "
        "the run's log key: `veritrain note verify --vkey VKEY --entry BODY FILE`."
    ),
)
def get_receipt(
    run: RunPath, index: IndexPath, ledger: LedgerDep, size: SizeQuery = None
) -> PlainTextResponse:
    ledger.entry(run, index)  # an entry the log does not have is 404, like /entries/{index}
    text = ledger.receipt(run, index, size)
    cache = IMMUTABLE if size is not None else SHORT
    return PlainTextResponse(text, headers={"Cache-Control": cache})


def run_summary(ledger: Ledger, run: RunInfo) -> RunSummary:
    """The run as its signed log says it is (status and steps from the last signed entry)."""
    state = run_state(ledger, run)
    return RunSummary(
        run_id=run.run_id,
        origin=run.origin,
        status=state.status,
        size=state.size,
        latest_step=state.latest_step,
        outer_steps=state.outer_steps,
        created_at=run.created_at,
        updated_at=run.updated_at,
        finished_at=run.finished_at,
    )


def entry_info(record: EntryRecord) -> EntryInfo:
    return EntryInfo(
        index=record.index,
        kind=record.kind,
        step=record.step,
        recorded_at=record.recorded_at,
        leaf_hash=record.leaf_hash.hex(),
        body=record.body.decode("utf-8"),
    )
