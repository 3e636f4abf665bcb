"""An emulated slow link between clusters: network namespaces, veth pairs and ``tc``.

Each cluster gets its own network namespace with one veth interface; the peers sit in a
"switch" namespace, bridged. The processes of a cluster share its namespace, so traffic
between them (pipeline activations) never leaves it: Linux delivers it locally, unshaped.
Traffic between clusters must leave through the cluster's veth, and that is shaped in both
directions (the cluster side's egress is its upload, the switch side's egress towards it its
download) with a token bucket (``tbf rate``), plus a ``netem delay`` when asked for and when
the kernel has netem. Nothing touches the host's own interfaces, addresses or routes.

::

    [vtbX-c0: vtbXc0 10.231.0.1] ==tbf== vtbXs0 \
                                                 br0 in [vtbX-sw]
    [vtbX-c1: vtbXc1 10.231.0.2] ==tbf== vtbXs1 /

Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and ``ip``/``tc`` from iproute2; the benchmark
installs nothing. The namespaces are deleted when the ``with`` block ends, also after an
error or a SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import FrameType

from veritrain.errors import BenchError

SUBNET = "10.231.0"
"""Addresses exist only inside the benchmark's namespaces, so any private subnet will do."""
QUEUE_LATENCY = "50ms"
"""How long tbf may queue a packet before dropping it: a router buffer of common depth. The
queue is one FIFO (this kernel has neither fq_codel nor sfq), so a deeper one would make every
small message wait behind an exchange in flight (bufferbloat); TCP fills the link either way,
as the veth round trip is microseconds."""


@dataclass(frozen=True)
class ClusterEndpoint:
    namespace: str
    interface: str
    address: str


@dataclass(frozen=True)
class NetnsLink:
    clusters: tuple[ClusterEndpoint, ...]
    switch: str
    rate_mbit: float
    delay_ms: float
    """One-way delay added per direction (0 when none was asked for)."""


def netns_unavailable() -> str | None:
    """Why namespaces cannot be used here, or None when they can (a probe namespace is made
    and deleted)."""
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not found (Debian package iproute2)"
    if os.geteuid() != 0:
        return "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    probe = f"vtb{os.getpid():x}-probe"
    try:
        _run(["ip", "netns", "add", probe])
    except BenchError as exc:
        return f"cannot create a network namespace: {exc}"
    _run(["ip", "netns", "del", probe])
    return None


def netem_available() -> bool:
    """Whether the kernel has the netem qdisc (some minimal kernels ship tbf without it)."""
    probe = f"vtb{os.getpid():x}-netem"
    _run(["ip", "netns", "add", probe])
    try:
        _run(
            [
                "ip",
                "-n",
                probe,
                "link",
                "add",
                "vtbprobe0",
                "type",
                "veth",
                "peer",
                "name",
                "vtbprobe1",
            ]
        )
        try:
            _run(
                [
                    "ip",
                    "netns",
                    "exec",
                    probe,
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    "vtbprobe0",
                    "root",
                    "netem",
                    "delay",
                    "1ms",
                ]
            )
        except BenchError:
            return False
        return True
    finally:
        _run(["ip", "netns", "del", probe])


@contextlib.contextmanager
def emulated_link(clusters: int, *, rate_mbit: float, delay_ms: float = 0.0) -> Iterator[NetnsLink]:
    """Namespaces for ``clusters`` clusters joined by links of ``rate_mbit`` (see module
    docstring)."""
    if clusters < 2 or clusters > 250:
        raise BenchError(f"expected 2 to 250 clusters for an emulated link, got {clusters}")
    if not rate_mbit > 0 or delay_ms < 0:
        raise BenchError(
            f"expected a rate > 0 and a delay >= 0, got {rate_mbit} Mbit/s and {delay_ms} ms"
        )
    tag = f"{os.getpid():x}"[-5:]
    switch = f"vtb{tag}-sw"
    endpoints = tuple(
        ClusterEndpoint(
            namespace=f"vtb{tag}-c{j}", interface=f"vtb{tag}c{j}", address=f"{SUBNET}.{j + 1}"
        )
        for j in range(clusters)
    )
    created: list[str] = []
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_on_sigterm) if main_thread else None
    try:
        for namespace in (switch, *(e.namespace for e in endpoints)):
            _run(["ip", "netns", "add", namespace])
            created.append(namespace)
        _run(["ip", "-n", switch, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", switch, "link", "set", "br0", "up"])
        for j, endpoint in enumerate(endpoints):
            peer = f"vtb{tag}s{j}"
            _run(
                [
                    "ip",
                    "link",
                    "add",
                    endpoint.interface,
                    "netns",
                    endpoint.namespace,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    peer,
                    "netns",
                    switch,
                ]
            )
            _run(["ip", "-n", switch, "link", "set", peer, "master", "br0", "up"])
            _run(
                [
                    "ip",
                    "-n",
                    endpoint.namespace,
                    "addr",
                    "add",
                    f"{endpoint.address}/24",
                    "dev",
                    endpoint.interface,
                ]
            )
            _run(["ip", "-n", endpoint.namespace, "link", "set", endpoint.interface, "up"])
            _run(["ip", "-n", endpoint.namespace, "link", "set", "lo", "up"])
            _shape(endpoint.namespace, endpoint.interface, rate_mbit, delay_ms)
            _shape(switch, peer, rate_mbit, delay_ms)
        yield NetnsLink(clusters=endpoints, switch=switch, rate_mbit=rate_mbit, delay_ms=delay_ms)
    finally:
        for namespace in reversed(created):
            with contextlib.suppress(BenchError):
                _run(["ip", "netns", "del", namespace])
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _shape(namespace: str, interface: str, rate_mbit: float, delay_ms: float) -> None:
    """Token bucket at ``rate_mbit`` (burst: 10 ms of traffic, at least two full frames),
    behind a netem delay when one is asked for."""
    rate_bits = int(rate_mbit * 1e6)
    burst = max(3200, rate_bits // 8 // 100)
    tbf = ["tbf", "rate", f"{rate_bits}bit", "burst", str(burst), "latency", QUEUE_LATENCY]
    tc = ["ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", interface]
    if delay_ms > 0:
        _run([*tc, "root", "handle", "1:", "netem", "delay", f"{delay_ms}ms"])
        _run([*tc, "parent", "1:", "handle", "2:", *tbf])
    else:
        _run([*tc, "root", *tbf])


def _run(argv: Sequence[str]) -> None:
    completed = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise BenchError(
            f"expected `{' '.join(argv)}` to succeed, got: "
            f"{completed.stderr.strip() or completed.returncode}"
        )


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
