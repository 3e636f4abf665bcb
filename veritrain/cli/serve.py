"""`veritrain serve`: the audit page, the JSON API and the download API (uvicorn)."""

from __future__ import annotations

from typing import Annotated

import typer


def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on; 0.0.0.0 for every interface.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8000,
) -> None:
    """Serve the audit page and the read-only HTTP API over the configured ledger and store."""
    from veritrain.settings import load_settings
    from web.server import base_url
    from web.server import serve as run_server

    settings = load_settings()
    typer.echo(f"veritrain: serving runs of {settings.origin} at {base_url(host, port)}/ (API docs at /docs; Ctrl+C to stop)")
    run_server(settings, host, port)
