"""The Jinja2 templates of the audit page (``web/templates``, server-rendered, no build
step) and the helpers every page uses."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.templating import Jinja2Templates
from jinja2 import Undefined
from starlette.responses import Response

from web.security_headers import PAGE_POLICY
from web.vendor import plotly_bundle

TEMPLATES = Jinja2Templates(directory=Path(__file__).parent / "templates")


def _when(moment: datetime | None) -> str:
    return "" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _number(value: Any, digits: int = 4) -> str:
    """Metric values as people read them: 4 significant digits, thousands separated."""
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"
    return str(value)


def _pretty(value: Any) -> str:
    # A field missing from a record is Jinja's Undefined: shown as null, not an error page.
    return json.dumps(value, indent=2, sort_keys=True, default=_undefined_as_null)


def _undefined_as_null(value: Any) -> None:
    if isinstance(value, Undefined):
        return None
    raise TypeError(f"expected JSON-able record values, got {type(value).__name__}")


def script_json(value: Any) -> str:
    """JSON safe to embed in a ``<script type="application/json">`` element: ``<`` is
    escaped so no string inside can close the element."""
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c")


TEMPLATES.env.filters["when"] = _when
TEMPLATES.env.filters["number"] = _number
TEMPLATES.env.filters["pretty"] = _pretty


def _epoch(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


TEMPLATES.env.filters["epoch"] = _epoch


def render(
    request: Request,
    template: str,
    context: Mapping[str, Any],
    *,
    status_code: int = 200,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """A page: ``template`` with ``context`` plus the values every page uses."""
    full = {"plotly_url": plotly_bundle().url, **context}
    return TEMPLATES.TemplateResponse(
        request,
        template,
        full,
        status_code=status_code,
        headers={**(headers or {}), "Content-Security-Policy": PAGE_POLICY},
    )


def render_error(
    request: Request, status: int, message: str, *, headers: Mapping[str, str]
) -> Response:
    """The HTML answer of a page route that failed."""
    return render(
        request,
        "error.html",
        {"status": status, "message": message},
        status_code=status,
        headers=headers,
    )
