"""Path and query parameters shared by several routes, validated before any lookup.

Invalid values are answered 422 by FastAPI's validation, with the reason, and are described
in the OpenAPI document. A digest in a URL must be exactly 64 lowercase hex characters
(DESIGN.md §4: one spelling per object), so nothing else ever reaches the store.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

SHA256_PATTERN = "^[0-9a-f]{64}$"
MAX_INT64 = 2**63 - 1
"""Indices, sizes and steps are 64-bit in the ledger; larger numbers are refused (422)
rather than sent to the database."""

RunPath = Annotated[str, Path(description="Run id, e.g. `demo-1`.", max_length=64)]
Sha256Path = Annotated[
    str,
    Path(
        pattern=SHA256_PATTERN,
        description="SHA-256 of the object: 64 lowercase hex characters (else 422).",
        examples=["e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"],
    ),
]
IndexPath = Annotated[int, Path(ge=0, le=MAX_INT64, description="Entry index, 0 = `run.genesis`.")]
StepPath = Annotated[int, Path(ge=0, le=MAX_INT64, description="Outer step, 0-based.")]
SizeQuery = Annotated[
    int | None,
    Query(
        ge=1,
        le=MAX_INT64,
        description="Tree size (number of entries); default: the latest signed tree head.",
    ),
]
