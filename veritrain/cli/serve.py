"""`veritrain serve`: the audit page, the JSON API and the download API (uvicorn)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from fastapi import FastAPI


def serve(
    host: Annotated[
        str, typer.Option(help="Interface to listen on; 0.0.0.0 for every interface.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8000,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            max=64,
            help="Server processes sharing the port (about one per core). Each keeps its own "
            "/metrics counters.",
        ),
    ] = 1,
) -> None:
    """Serve the audit page and the read-only HTTP API over the configured ledger and store."""
    from veritrain.settings import load_settings
    from web.server import base_url
    from web.server import serve as run_server

    settings = load_settings()
    shown = f"{workers} worker processes, " if workers > 1 else ""
    typer.echo(
        f"veritrain: serving runs of {settings.origin} at {base_url(host, port)}/ "
        f"({shown}API docs at /docs; Ctrl+C to stop)"
    )
    run_server(settings, host, port, workers=workers, factory=f"{__name__}:app_from_environment")


def app_from_environment() -> FastAPI:
    """The app for the settings in the environment: what each worker of ``--workers N`` runs."""
    from veritrain.settings import load_settings
    from web.app import create_app

    return create_app(load_settings())
