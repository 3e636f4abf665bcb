"""Starting the processes: each cluster its own world, spawned on this host or under torchrun.

Every cluster is one ``torch.distributed`` world of S processes (rank = stage), meeting at its
own *store* (a ``TCPStore``). That store is also where torchft's quorum groups meet when the
cluster is the quorum's primary (membership.py), so the other clusters must reach it: its
address is the cluster's *advertised* one.

* ``veritrain train`` on one host (``one_host``): this process opens every cluster's store on
  127.0.0.1, the run channel and -- when the run has several clusters -- a lighthouse
  (lighthouse.py), and spawns all C x S processes with ``torch.multiprocessing`` (forkserver
  start method); if any process fails, the others are stopped and the failure comes back as one
  ``WorkerError`` naming it.
* ``veritrain train --cluster J --lighthouse URL`` (``one_cluster``): this host runs cluster J
  only: its store listens on every interface and is advertised at the address this host uses to
  reach the lighthouse; the channel is the lighthouse's.
* ``torchrun ... -m veritrain train --cluster J --lighthouse URL``: torchrun's variables name
  this process (RANK = stage, WORLD_SIZE = S) and its cluster's store (MASTER_ADDR/PORT).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException

from trainer.errors import ConfigError, WorkerError
from trainer.runtime.channel import ChannelAddress, serve_channel
from trainer.runtime.lighthouse import Lighthouse, LighthouseSettings

TIMEOUT = timedelta(minutes=30)
"""How long a collective inside a cluster may wait for a peer before the process gives up."""
LOOPBACK = "127.0.0.1"

Spec = TypeVar("Spec")


@dataclass(frozen=True, kw_only=True)
class Links:
    """How a launch's processes reach their cluster's world and the other clusters (picklable)."""

    stores: Mapping[int, tuple[str, int]]
    """Each cluster of the launch: its store, at an address every cluster reaches."""
    channel: ChannelAddress
    lighthouse: str | None
    """The lighthouse URL; None: a lone cluster, which exchanges with nobody."""
    advertise_host: str
    """This host's address as the other clusters reach it."""


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def torchrun_rank(stages: int, data_parallel: int = 1) -> tuple[int, int]:
    """(cluster rank, local rank) of this process under torchrun, checking the world size
    (the cluster rank is ``replica * stages + stage``, topology.py)."""
    given = int(os.environ["WORLD_SIZE"])
    if given != stages * data_parallel:
        raise ConfigError(
            "expected WORLD_SIZE = stages x data_parallel = "
            f"{stages * data_parallel} (each torchrun launch is "
            f"one cluster), got {given} (set --nnodes * "
            "--nproc-per-node to the processes of one cluster)"
        )
    return int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))


def torchrun_links(cluster: int, lighthouse: str | None) -> Links:
    """Links of a torchrun launch: the cluster's store is torchrun's own."""
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if lighthouse is None:
        return Links(
            stores={cluster: (host, port)},
            channel=ChannelAddress(host, port),
            lighthouse=None,
            advertise_host=host,
        )
    return Links(
        stores={cluster: (host, port)},
        channel=ChannelAddress.of_lighthouse(lighthouse),
        lighthouse=lighthouse,
        advertise_host=route_to(lighthouse),
    )


@contextlib.contextmanager
def one_host(
    clusters: Sequence[int], stages: int, *, settings: LighthouseSettings | None
) -> Iterator[Links]:
    """Stores for ``clusters`` on 127.0.0.1, the channel and, with ``settings``, a lighthouse."""
    del stages
    stores = {c: _store(LOOPBACK) for c in clusters}
    lighthouse = (
        Lighthouse(host=LOOPBACK, port=0, advertise=LOOPBACK, settings=settings)
        if settings
        else None
    )
    channel_store = None if lighthouse is not None else _free_channel()
    try:
        channel = (
            ChannelAddress.of_lighthouse(lighthouse.url)
            if lighthouse is not None
            else ChannelAddress(LOOPBACK, channel_store.port)  # type: ignore[union-attr]
        )
        yield Links(
            stores={c: (LOOPBACK, s.port) for c, s in stores.items()},
            channel=channel,
            lighthouse=lighthouse.url if lighthouse is not None else None,
            advertise_host=LOOPBACK,
        )
    finally:
        if lighthouse is not None:
            lighthouse.close()
        del stores, channel_store


@contextlib.contextmanager
def one_cluster(
    cluster: int, *, lighthouse: str, advertise_host: str | None = None
) -> Iterator[Links]:
    """Cluster ``cluster``'s store on every interface, advertised where the lighthouse sees
    this host, for a launch that runs only this cluster."""
    host = advertise_host or route_to(lighthouse)
    store = _store("0.0.0.0")
    if "GLOO_SOCKET_IFNAME" not in os.environ and host != LOOPBACK:
        interface = interface_of(host)
        if interface is not None:  # gloo must listen where the other clusters can reach it
            os.environ["GLOO_SOCKET_IFNAME"] = interface
    try:
        yield Links(
            stores={cluster: (host, store.port)},
            channel=ChannelAddress.of_lighthouse(lighthouse),
            lighthouse=lighthouse,
            advertise_host=host,
        )
    finally:
        del store


def init_cluster_world(backend: str, rank: int, size: int, store: tuple[str, int] | None) -> None:
    """Join this process's cluster world as ``rank`` of ``size`` (S * D processes; ``store``
    None: torchrun's ``env://``)."""
    if store is None:
        dist.init_process_group(
            backend, init_method="env://", rank=rank, world_size=size, timeout=TIMEOUT
        )
        return
    host, port = store
    # TCPStore is public API; torch's stubs just do not re-export it from torch.distributed.
    client = dist.TCPStore(host, port, size, is_master=False, timeout=TIMEOUT)  # type: ignore[attr-defined]
    dist.init_process_group(backend, store=client, rank=rank, world_size=size, timeout=TIMEOUT)


def spawn(
    entry: Callable[[int, Spec, Any], None],
    spec: Spec,
    processes: int,
    *,
    preload: Sequence[str] = (),
) -> Any:
    """Run ``entry(index, spec, results)`` in ``processes`` spawned processes and return what
    the coordinating one put in ``results`` (or None). ``preload`` names modules the processes
    will import (a recorder's), imported once by the forkserver when this process starts it."""
    # forkserver: one clean server process imports torch and the trainer once, then forks the
    # processes from it -- every launch after the first skips the imports (seconds per process
    # on a small machine), and no process inherits the caller's threads or state as plain fork
    # would.
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(
        [
            "torch",
            "torch.distributed",
            "torch.distributed.pipelining",
            "trainer.runtime.worker",
            *preload,
        ]
    )
    results = context.SimpleQueue()
    environment = dict(os.environ)
    environment.setdefault("RUST_LOG", "warn")  # torchft's native side logs every quorum at INFO
    try:
        mp.start_processes(  # type: ignore[attr-defined,no-untyped-call]
            _in_launch_environment,
            args=(entry, environment, spec, results),
            nprocs=processes,
            join=True,
            start_method="forkserver",
        )
    except ProcessRaisedException as exc:
        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise WorkerError(f"training process {exc.error_index} failed: {last}") from exc
    except ProcessExitedException as exc:
        raise WorkerError(
            f"training process {exc.error_index} exited with code {exc.exit_code}"
        ) from exc
    return None if results.empty() else results.get()


def route_to(url: str) -> str:
    """The address this host uses to reach ``url``'s host (no packet is sent)."""
    parts = urlsplit(url if "//" in url else f"http://{url}")
    host = parts.hostname or LOOPBACK
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((host, parts.port or 80))
        except OSError as exc:
            raise WorkerError(f"cannot find a route to the lighthouse at {url}: {exc}") from None
        return str(probe.getsockname()[0])


def interface_of(address: str) -> str | None:
    """The network interface that holds ``address`` (Linux), or None."""
    import fcntl
    import struct

    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(
                    probe.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15])
                )
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == address:
                return name
    return None


def _store(host: str) -> Any:
    return dist.TCPStore(host, 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)  # type: ignore[attr-defined]


def _free_channel() -> Any:
    return serve_channel(0, host=LOOPBACK)


def _in_launch_environment(
    index: int,
    entry: Callable[[int, Spec, Any], None],
    environment: dict[str, str],
    spec: Spec,
    results: Any,
) -> None:
    """Run ``entry`` with the launcher's environment of *this* launch. A forkserver forks
    processes from the environment it was started with (at the first launch), so settings
    changed since -- object-store credentials, ``VERITRAIN_*`` -- would otherwise not reach them."""
    os.environ.clear()
    os.environ.update(environment)
    entry(index, spec, results)
