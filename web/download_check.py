"""Measure a download through the API the way a user experiences it, including a broken
connection and its resumption, and (optionally) the server's memory while it serves.

For benchmarks and the slow tests: ``download_with_resume(url, target, interrupt_after=N,
server_pid=P)`` downloads ``url`` into ``target``, drops the connection after ``N`` bytes,
resumes with ``Range: bytes=N-`` and ``If-Range: <ETag>`` (RFC 9110 §13.1.5, §14.2), and
returns a :class:`DownloadReport` with the SHA-256 of the assembled file and the server
process's peak resident-memory growth during the transfer (Linux: ``VmHWM`` of
``/proc/<pid>/status``, reset first through ``/proc/<pid>/clear_refs``).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import httpx

CHUNK = 1 << 20


@dataclass(frozen=True)
class DownloadReport:
    size: int
    """Bytes in the assembled file."""
    sha256: str
    """SHA-256 of the assembled file (hex); compare it with the ETag / the digest."""
    etag: str
    seconds: float
    interrupted_at: int | None
    """Bytes received before the connection was dropped, if it was."""
    resumed_status: int | None
    """Status of the resuming request: 206 when the server honoured the range."""
    server_peak_growth: int | None
    """Server's peak resident memory during the transfer minus its resident memory before,
    in bytes (None without a ``server_pid``)."""


def download_with_resume(
    url: str,
    target: Path,
    *,
    interrupt_after: int | None = None,
    server_pid: int | None = None,
    timeout_s: float = 120.0,
) -> DownloadReport:
    """Download ``url`` to ``target`` (following redirects), optionally interrupted after
    ``interrupt_after`` bytes and resumed; see the module docstring."""
    baseline = _start_memory_window(server_pid) if server_pid is not None else None
    started = time.perf_counter()
    with (
        httpx.Client(timeout=timeout_s, follow_redirects=True) as client,
        open(target, "wb") as out,
    ):
        etag, received = _fetch(client, url, out, stop_after=interrupt_after)
        resumed_status = None
        if interrupt_after is not None:
            # A new connection, as a client does after a network failure.
            headers = {"Range": f"bytes={received}-", "If-Range": etag}
            with client.stream("GET", url, headers=headers) as response:
                resumed_status = response.status_code
                if response.status_code == 200:  # the server ignored the range: start over
                    out.seek(0)
                    out.truncate()
                response.raise_for_status()
                for chunk in response.iter_raw(CHUNK):
                    out.write(chunk)
    seconds = time.perf_counter() - started
    growth = None
    if server_pid is not None and baseline is not None:
        growth = _peak_kib(server_pid) * 1024 - baseline
    return DownloadReport(
        size=target.stat().st_size,
        sha256=_file_sha256(target),
        etag=etag,
        seconds=seconds,
        interrupted_at=received if interrupt_after is not None else None,
        resumed_status=resumed_status,
        server_peak_growth=growth,
    )


def _fetch(
    client: httpx.Client, url: str, out: BinaryIO, *, stop_after: int | None
) -> tuple[str, int]:
    """GET ``url`` into ``out``; stop after ``stop_after`` bytes. Returns (ETag, bytes)."""
    received = 0
    with client.stream("GET", url) as response:
        response.raise_for_status()
        etag = response.headers.get("etag", "")
        for chunk in response.iter_raw(CHUNK):
            if stop_after is not None and received + len(chunk) >= stop_after:
                chunk = chunk[: stop_after - received]
                out.write(chunk)
                received += len(chunk)
                break  # leaving the block closes the connection mid-body
            out.write(chunk)
            received += len(chunk)
    return etag, received


def _start_memory_window(pid: int) -> int:
    """Reset the process's peak-RSS counter (``echo 5 > /proc/PID/clear_refs``, Linux >= 4.0)
    and return its current resident memory in bytes."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _status_kib(pid, "VmRSS:") * 1024


def _peak_kib(pid: int) -> int:
    return _status_kib(pid, "VmHWM:")


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    raise RuntimeError(f"expected {field} in /proc/{pid}/status, found none")


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
