"""Time one operation and its peak memory in a fresh process.

Each operation of the storage benchmark (a transfer) and of the data benchmark (a corpus
build) runs alone in a new interpreter, so its high-water mark of resident memory (``VmHWM``
in /proc/self/status) belongs to it only. The interpreter,
imports and clients are warmed up first and their peak reported as the baseline; what the
operation adds on top is the growth that must stay flat as objects grow.

As a program (what ``probe`` runs)::

    python -m veritrain.bench.memory_probe OPERATION ARGS...   ->  one JSON line on stdout

External tools (``sha256sum``, ``cp``) are measured by ``command`` under GNU time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from veritrain.errors import BenchError

CHUNK = 1 << 20
GNU_TIME = "/usr/bin/time"


@dataclass(frozen=True)
class Measurement:
    seconds: float
    """The operation alone (interpreter start-up and warm-up excluded for Python operations)."""
    peak_kib: int
    baseline_kib: int
    """Peak before the operation started (0 for external tools)."""

    @property
    def growth_kib(self) -> int:
        return self.peak_kib - self.baseline_kib


def probe(operation: str, *args: str, env: Mapping[str, str] | None = None) -> Measurement:
    """Run ``operation`` in a fresh interpreter and read its measurement."""
    completed = subprocess.run(
        [sys.executable, "-m", "veritrain.bench.memory_probe", operation, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if completed.returncode != 0:
        raise BenchError(
            f"expected probe {operation!r} to succeed, it failed:\n{completed.stderr[-2000:]}"
        )
    document = json.loads(completed.stdout.strip().splitlines()[-1])
    return Measurement(
        seconds=document["seconds"],
        peak_kib=document["peak_kib"],
        baseline_kib=document["baseline_kib"],
    )


def command(argv: Sequence[str]) -> Measurement:
    """Run an external command; its wall time and its own peak resident memory.

    The peak comes from GNU time (``/usr/bin/time -f %M``), which forks the command from
    its own small image: ``wait4`` on a child forked from this (large) interpreter would
    report this interpreter's memory too, since Linux keeps the pre-exec high-water mark.
    Without GNU time the peak is reported as 0 (unknown)."""
    with tempfile.NamedTemporaryFile(prefix="veritrain-time-", suffix=".txt") as report:
        wrapped = (
            [GNU_TIME, "-f", "%M", "-o", report.name, *argv]
            if Path(GNU_TIME).is_file()
            else list(argv)
        )
        started = time.perf_counter()
        completed = subprocess.run(
            wrapped, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
        )
        seconds = time.perf_counter() - started
        if completed.returncode != 0:
            error = completed.stderr.decode(errors="replace").strip()
            raise BenchError(
                f"expected {argv[0]} to succeed, it exited with {completed.returncode}: {error}"
            )
        text = Path(report.name).read_text().strip()
    return Measurement(
        seconds=seconds, peak_kib=int(text.splitlines()[-1]) if text else 0, baseline_kib=0
    )


def peak_rss_kib() -> int:
    """This process's high-water mark of resident memory (Linux ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise BenchError("expected VmHWM in /proc/self/status (Linux), found none")


# --------------------------------------------------------------------------------------------
# Operations (run inside the probe process). Each returns the timed callable after warming up.


def _store_put(url: str, path: str) -> Callable[[], object]:
    from storage import open_store

    store = open_store(url)
    store.put_bytes(b"warm-up")

    def run() -> object:
        with open(path, "rb") as source:
            return store.put(source)

    return run


def _store_put_file(url: str, path: str) -> Callable[[], object]:
    from storage import open_store

    store = open_store(url)
    store.put_bytes(b"warm-up")
    return lambda: store.put_file(path)


def _store_get(url: str, digest: str, out: str) -> Callable[[], object]:
    from storage import open_store

    store = open_store(url)
    store.read_bytes(store.put_bytes(b"warm-up"), max_size=64)

    def run() -> object:
        with store.open(digest) as reader, open(out, "wb") as sink:
            for chunk in reader:
                sink.write(chunk)
        return None

    return run


def _boto3_upload(bucket: str, key: str, path: str) -> Callable[[], object]:
    from storage.s3 import s3_client

    client = s3_client()
    client.head_bucket(Bucket=bucket)

    def run() -> object:
        with open(path, "rb") as source:
            client.upload_fileobj(source, bucket, key)
        return None

    return run


def _boto3_download(bucket: str, key: str, out: str) -> Callable[[], object]:
    from storage.s3 import s3_client

    client = s3_client()
    client.head_bucket(Bucket=bucket)

    def run() -> object:
        with open(out, "wb") as sink:
            client.download_fileobj(bucket, key, sink)
        return None

    return run


def _http_get(url: str, out: str) -> Callable[[], object]:
    import httpx

    client = httpx.Client(timeout=120.0, follow_redirects=True)
    client.head(url)

    def run() -> object:
        with client.stream("GET", url) as response, open(out, "wb") as sink:
            response.raise_for_status()
            for chunk in response.iter_raw(CHUNK):
                sink.write(chunk)
        return None

    return run


def _read_file(path: str, out: str) -> Callable[[], object]:
    def run() -> object:
        with open(path, "rb") as source, open(out, "wb") as sink:
            while chunk := source.read(CHUNK):
                sink.write(chunk)
        return None

    return run


def _data_build(config_path: str, directory: str, result_path: str) -> Callable[[], object]:
    """Build the corpus of a ``DataConfig`` (JSON file) under ``directory``; the manifest goes
    to ``result_path``. Warm-up imports the tokenizer and Parquet libraries the build uses."""
    import pyarrow.parquet  # noqa: F401
    import tokenizers  # noqa: F401

    from trainer.data.build import prepare_data
    from trainer.data.config import DataConfig

    config = DataConfig(**json.loads(Path(config_path).read_text()))

    def run() -> object:
        prepared = prepare_data(config, Path(directory))
        Path(result_path).write_text(json.dumps(prepared.manifest.to_payload()))
        return None

    return run


OPERATIONS: dict[str, Callable[..., Callable[[], object]]] = {
    "store-put": _store_put,
    "store-put-file": _store_put_file,
    "store-get": _store_get,
    "boto3-upload": _boto3_upload,
    "boto3-download": _boto3_download,
    "http-get": _http_get,
    "copy-file": _read_file,
    "data-build": _data_build,
}


def main(argv: Sequence[str]) -> None:
    if not argv or argv[0] not in OPERATIONS:
        raise SystemExit(f"expected one of {', '.join(OPERATIONS)}, got {argv[:1]}")
    run = OPERATIONS[argv[0]](*argv[1:])
    baseline = peak_rss_kib()
    started = time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "peak_kib": peak_rss_kib(), "baseline_kib": baseline}))


if __name__ == "__main__":
    main(sys.argv[1:])
