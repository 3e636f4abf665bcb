"""`veritrain demo [--workdir DIR] [--no-serve] [--port P]`: train a small run on the
embedded defaults, verify it, re-execute a step, then serve its audit page."""

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
) -> None:
    """Train, record, verify and reproduce a tiny DiLoCoX-style run, then serve its page."""
    from veritrain.demo import run_demo
    from veritrain.settings import load_settings

    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        os.chdir(workdir)
    result = run_demo(load_settings())
    if not result.ok:
        raise typer.Exit(code=1)
    if not no_serve:
        from web.server import serve

        typer.echo(
            f"serving the audit page of run {result.run_id} at "
            f"http://{host}:{port}/runs/{result.run_id} (Ctrl-C to stop)"
        )
        serve(load_settings(), host=host, port=port)
