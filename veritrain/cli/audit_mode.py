"""The ``--mode`` option that ``veritrain reproduce`` and ``veritrain audit`` share: how a
re-execution is judged (veritrain/audit/modes.py)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

ModeOption = Annotated[
    str,
    typer.Option(
        help="auto: the policy decides (bitwise on its hardware class); "
        "bitwise or tolerance: demand one."
    ),
]


def checked_mode(mode: str) -> Any:
    """``mode`` if it is one the audit knows (typed for ``ModeChoice``'s literal), else a usage
    error naming the option."""
    if mode not in ("auto", "bitwise", "tolerance"):
        raise typer.BadParameter(
            f"expected auto, bitwise or tolerance, got {mode!r}", param_hint="--mode"
        )
    return mode
