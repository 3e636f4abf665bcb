"""`veritrain demo [--workdir DIR] [--no-serve] [--port P] [--outer-steps T] [--inner-steps H]`:
train a small run on the embedded defaults, verify it, re-execute a step, then serve its audit
page."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer


def demo(
    workdir: Annotated[
        Path | None,
        typer.Option(
            help="Keep the ledger, objects and keys under DIR/veritrain-data (default: here)."
        ),
    ] = None,
    no_serve: Annotated[
        bool, typer.Option("--no-serve", help="Stop after verifying; do not serve the page.")
    ] = False,
    host: Annotated[str, typer.Option(help="Address to serve the audit page on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to serve the audit page on.")] = 8000,
    outer_steps: Annotated[
        int | None,
        typer.Option(min=2, help="Outer steps T to train (default: the tiny preset's 6)."),
    ] = None,
    inner_steps: Annotated[
        int | None,
        typer.Option(min=1, help="Local steps H per outer step (default: the tiny preset's 20)."),
    ] = None,
) -> None:
    """Train, record, verify and reproduce a tiny DiLoCoX-style run, then serve its page."""
    from veritrain.demo import run_demo
    from veritrain.settings import load_settings

    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        os.chdir(workdir)
    result = run_demo(load_settings(), outer_steps=outer_steps, inner_steps=inner_steps)
    if not result.ok:
        raise typer.Exit(code=1)
    if not no_serve:
        from web.server import serve

        typer.echo(
            f"serving the audit page of run {result.run_id} at "
            f"http://{host}:{port}/runs/{result.run_id} (Ctrl-C to stop)"
        )
        serve(load_settings(), host=host, port=port)
