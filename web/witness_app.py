"""The HTTP face of a C2SP tlog-witness (``veritrain witness serve``).

Routes, at the witness's root (its submission and monitoring prefix):

    POST /add-checkpoint          tlog-witness add-checkpoint: 200 with cosignature lines,
                                  400 / 403 / 404 / 409 (text/x.tlog.size) / 422
    GET  /<origin hash>/checkpoint  tlog-witness monitoring: the latest cosigned checkpoint
    GET  /origins                 every log it cosigned: "<origin> <size>" lines (our addition,
                                  so a verifier sees a second log claiming the same run)
    GET  /healthz                 liveness, and the witness's verifier key

The logic is ``ledger.witness.Witness``; this module only moves bytes and maps its
refusals to the statuses the spec fixes. Malformed input of any kind is a 4xx, never a 500.
Database work runs in the thread pool, off the event loop.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from attestation.keys import SigningKey
from ledger import errors
from ledger.db import create_engine
from ledger.witness import TrustedLogs, Witness
from ledger.witness.submission import MAX_BODY_BYTES, SIZE_CONTENT_TYPE, format_size

TEXT = "text/plain; charset=utf-8"
_ORIGIN_HASH = re.compile(r"[0-9a-f]{64}")

# The most specific class first. tlog-witness fixes every one of these statuses.
_STATUS: tuple[tuple[type[errors.LedgerError], int], ...] = (
    (errors.MalformedSubmissionError, 400),
    (errors.UntrustedCheckpointError, 403),
    (errors.UnknownLogError, 404),
    (errors.OldSizeMismatchError, 409),
    (errors.InconsistentCheckpointError, 422),
    (errors.NotFoundError, 404),
    (errors.SchemaMissingError, 503),
)


@dataclass(frozen=True, kw_only=True)
class WitnessSettings:
    """What a witness server needs."""

    key: SigningKey
    """The witness's cosigner key (signature type 0x04)."""
    database_url: str
    """Where the witness keeps what it cosigned (a migrated ledger database)."""
    logs: TrustedLogs
    """The logs it cosigns for."""


def create_witness_app(settings: WitnessSettings) -> Starlette:
    """The witness app; the database engine opens when the app starts, closes when it stops."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        engine = create_engine(settings.database_url)
        app.state.witness = Witness(engine, settings.key, settings.logs)
        try:
            yield
        finally:
            engine.dispose()

    return Starlette(
        routes=[
            Route("/add-checkpoint", add_checkpoint, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/origins", cosigned_origins, methods=["GET"]),
            Route("/{origin_hash}/checkpoint", monitored_checkpoint, methods=["GET"]),
        ],
        lifespan=lifespan,
    )


async def add_checkpoint(request: Request) -> Response:
    body = await _read_body(request)
    if body is None:
        return PlainTextResponse(
            f"expected a body of at most {MAX_BODY_BYTES} bytes\n", status_code=413, media_type=TEXT
        )
    witness: Witness = request.app.state.witness
    try:
        lines = await run_in_threadpool(witness.add_checkpoint, body)
    except errors.LedgerError as exc:
        return _refusal(exc)
    return PlainTextResponse(lines, media_type=TEXT, headers={"Cache-Control": "no-store"})


async def monitored_checkpoint(request: Request) -> Response:
    hashed = request.path_params["origin_hash"]
    if not _ORIGIN_HASH.fullmatch(hashed):
        return PlainTextResponse(
            "expected a lowercase hex SHA-256 of the log origin\n", status_code=404, media_type=TEXT
        )
    witness: Witness = request.app.state.witness
    try:
        cosigned = await run_in_threadpool(witness.latest_by_origin_hash, hashed)
    except errors.LedgerError as exc:
        return _refusal(exc)
    # tlog-witness lets this view lag by up to an hour; a minute of caching is far inside that.
    return PlainTextResponse(
        cosigned.note, media_type=TEXT, headers={"Cache-Control": "public, max-age=60"}
    )


async def cosigned_origins(request: Request) -> Response:
    witness: Witness = request.app.state.witness
    origins = await run_in_threadpool(witness.origins)
    return PlainTextResponse(
        "".join(f"{origin} {size}\n" for origin, size in origins),
        media_type=TEXT,
        headers={"Cache-Control": "public, max-age=60"},
    )


async def healthz(request: Request) -> Response:
    witness: Witness = request.app.state.witness
    return JSONResponse({"status": "ok", "witness": witness.vkey})


def serve_witness(
    settings: WitnessSettings, *, host: str, port: int, log_level: str = "info"
) -> None:
    """Serve the witness in the foreground until interrupted."""
    uvicorn.run(create_witness_app(settings), host=host, port=port, log_level=log_level)


async def _read_body(request: Request) -> bytes | None:
    """The request body, or None once it grows past :data:`MAX_BODY_BYTES` (read no further)."""
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _refusal(exc: errors.LedgerError) -> Response:
    status = next((code for kind, code in _STATUS if isinstance(exc, kind)), None)
    if status is None:
        raise exc  # not a refusal: a server fault, answered 500 by Starlette
    if isinstance(exc, errors.OldSizeMismatchError):
        # tlog-witness: the 409 body is the latest cosigned size, typed text/x.tlog.size.
        # Set as a header, not a media type: Starlette would append "; charset=utf-8".
        return Response(
            format_size(exc.size), status_code=409, headers={"Content-Type": SIZE_CONTENT_TYPE}
        )
    headers = {"Retry-After": "30"} if status == 503 else None
    return PlainTextResponse(f"{exc}\n", status_code=status, media_type=TEXT, headers=headers)
