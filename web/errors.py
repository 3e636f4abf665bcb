"""The web layer's own errors, and the one handler that turns every package's errors into
HTTP responses.

    WebError                     raised by web/ itself
    ├── BadRequestError          a parameter the path/query validation could not express (400)
    ├── NotFoundError            a revision, step or file the run does not have (404)
    ├── RangeNotSatisfiableError no requested byte range overlaps the object (416)
    └── UnreadableRunError       the run's record cannot answer the request (502)

``ledger.errors``, ``storage.errors`` and ``records.RecordError`` (an entry that does not
read as its format: 502, the stored record is at fault) are mapped by :data:`_STATUS` (the
most specific class first). API routes answer ``{"detail": "<message>"}`` (FastAPI's own
error shape); page routes render ``error.html``. A missing object is answered without the
store's own message, which names where the store lives; that detail goes to the server log.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from ledger import errors as ledger_errors
from records import errors as records_errors
from storage import errors as storage_errors

LOG = logging.getLogger("veritrain.web")
_DIGEST = re.compile(r"[0-9a-f]{64}")


class WebError(Exception):
    """Base of the errors raised by ``web``; carries its HTTP status and extra headers."""

    status_code = 500

    def __init__(self, message: str, *, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.headers: dict[str, str] = dict(headers or {})


class BadRequestError(WebError):
    """The request names something malformed (e.g. a revision that is not ``step-N``)."""

    status_code = 400


class NotFoundError(WebError):
    """The run exists but has no such revision, step or file."""

    status_code = 404


class RangeNotSatisfiableError(WebError):
    """None of the requested byte ranges overlaps the object (RFC 9110 §15.5.17): the answer
    carries ``Content-Range: bytes */<size>``."""

    status_code = 416

    def __init__(self, size: int) -> None:
        super().__init__(
            f"expected a byte range starting before the object's end ({size} bytes), got none",
            headers={"Content-Range": f"bytes */{size}"},
        )


class UnreadableRunError(WebError):
    """The run's signed record cannot answer (e.g. its last entry does not read as its format):
    the stored record, not the request, is at fault."""

    status_code = 502


# Ordered: the first matching class wins, so subclasses come before their bases.
_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (ledger_errors.NotFoundError, 404),
    (ledger_errors.InvalidRequestError, 400),
    (ledger_errors.ConflictError, 409),
    (ledger_errors.VerificationError, 422),
    (ledger_errors.SchemaMissingError, 503),
    (records_errors.RecordError, 502),
    (ledger_errors.LedgerError, 500),
    (storage_errors.ObjectNotFoundError, 404),
    (storage_errors.InvalidDigestError, 400),
    (storage_errors.InvalidRangeError, 416),
    # What the store returned is unusable (corrupt, truncated, malformed manifest, S3 down):
    # the server sits in front of the store, so these are gateway errors.
    (storage_errors.StorageError, 502),
)


def status_for(exc: Exception) -> int:
    """The HTTP status an error of ``web``, ``ledger`` or ``storage`` is answered with."""
    if isinstance(exc, WebError):
        return exc.status_code
    for error_type, status in _STATUS:
        if isinstance(exc, error_type):
            return status
    return 500


def install_error_handlers(app: FastAPI) -> None:
    """Register the one handler for the three packages' error hierarchies."""
    for base in (
        WebError,
        ledger_errors.LedgerError,
        storage_errors.StorageError,
        records_errors.RecordError,
    ):
        app.add_exception_handler(base, _handle)


async def _handle(request: Request, exc: Exception) -> Response:
    status = status_for(exc)
    headers = dict(exc.headers) if isinstance(exc, WebError) else {}
    message = str(exc)
    if isinstance(exc, storage_errors.ObjectNotFoundError):
        LOG.info("%s %s: %s", request.method, request.url.path, message)
        digest = _DIGEST.search(message)
        message = (
            f"no object sha256/{digest.group(0)} is stored"
            if digest
            else "no such object is stored"
        )
    if status == 503:
        headers.setdefault("Retry-After", "30")
    if getattr(request.state, "html_errors", False):
        from web.templating import render_error  # the templates live there

        return render_error(request, status, message, headers=headers)
    return JSONResponse({"detail": message}, status_code=status, headers=headers)


async def html_errors(request: Request) -> None:
    """A router dependency: errors of the routes it guards are rendered as HTML pages.
    ``async`` so that FastAPI does not hand it to its thread pool (web/deps.py)."""
    request.state.html_errors = True
