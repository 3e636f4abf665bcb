"""`veritrain lighthouse`: where the clusters of a run on several hosts meet (DESIGN.md §6).

Serves torchft's Lighthouse on ``--port`` (it forms each round's quorum from the clusters that
ask and still send heartbeats) and the run channel on ``--port + 1`` (enrolments, contribution
headers, step reports, attestation requests and quotes between clusters). One lighthouse
serves one launch of a run: start a new one to resume a run after its coordinator stopped.
"""

from __future__ import annotations

import signal
import threading
from typing import Annotated

import typer


def lighthouse(
    host: Annotated[
        str, typer.Option(help="Interface to listen on; 0.0.0.0 for every interface.")
    ] = "0.0.0.0",
    port: Annotated[
        int, typer.Option(min=1, max=65534, help="torchft's port; the run channel uses port + 1.")
    ] = 29510,
    min_clusters: Annotated[
        int, typer.Option(min=1, help="No quorum forms with fewer clusters.")
    ] = 1,
    heartbeat_timeout: Annotated[
        float,
        typer.Option(min=0.1, help="Seconds without a heartbeat after which a cluster is dropped."),
    ] = 5.0,
    join_timeout: Annotated[
        float,
        typer.Option(
            min=0.1,
            help=(
                "Seconds a quorum waits for clusters that "
                "beat but have not asked yet (one that hangs)."
            ),
        ),
    ] = 30.0,
    exchange_timeout: Annotated[
        float,
        typer.Option(
            min=1.0,
            help="Seconds one payload exchange may take before a silent peer counts as gone.",
        ),
    ] = 600.0,
    advertise: Annotated[
        str | None,
        typer.Option(help="Address to print for the clusters (default: the host's name)."),
    ] = None,
) -> None:
    """Serve torchft's lighthouse and the run channel until interrupted."""
    import socket

    from trainer.runtime.lighthouse import Lighthouse, LighthouseSettings

    settings = LighthouseSettings(
        min_clusters=min_clusters,
        heartbeat_timeout=heartbeat_timeout,
        join_timeout=join_timeout,
        exchange_timeout=exchange_timeout,
    )
    served = Lighthouse(
        host=host, port=port, advertise=advertise or socket.gethostname(), settings=settings
    )
    typer.echo(
        f"veritrain: lighthouse at {served.url} (run channel "
        f"on port {served.port + 1}); clusters join with "
        f"`veritrain train --cluster J --lighthouse {served.url} ...`; a cluster silent for "
        f"{heartbeat_timeout:g} s leaves the quorum (Ctrl+C to stop)"
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        served.close()
