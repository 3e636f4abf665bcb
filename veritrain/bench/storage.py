"""``veritrain bench storage``: what content addressing costs over moving the bytes plainly.

Every number is a ratio of throughputs, ours over a baseline doing the same transfer without
our guarantees, measured on the same bytes, machine and server, each operation in a fresh
process with its peak memory (memory_probe.py):

| measurement | ours | baseline |
|---|---|---|
| store-and-hash | ``LocalStore.put(stream)``: hash while streaming to a temp file, fsync, link | ``sha256sum`` + ``cp`` |
| S3 upload | ``S3Store.put_file`` (hash, then a streamed, conditional upload) | boto3 ``upload_fileobj`` |
| S3 download | ``S3Store.open`` read in full (verified as it streams) | boto3 ``download_fileobj`` |
| API download | ``GET /api/v1/objects/{sha256}`` from ``veritrain serve`` | reading the stored file directly |

A ratio of 1.0 means "as fast as the baseline". Memory is measured at two object sizes:
it is *flat* when the peak growth over the warmed-up process does not grow with the object.
S3 comes from the ``AWS_*`` variables or the test server's ``VERITRAIN_TEST_S3_*`` ones; the
bench creates a scratch bucket there and deletes it afterwards. Without either, the S3 rows
say "skipped".
"""  # noqa: E501

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.db import upgrade
from veritrain.bench.memory_probe import CHUNK, Measurement, command, probe
from veritrain.bench.scratch import scratch_dir
from veritrain.bench.server import served
from veritrain.errors import BenchError

MiB = 1 << 20
STORE_AND_HASH_TARGET = 0.8
FLAT_GROWTH_KIB = 16 * 1024
"""Peak growth may differ by at most this between the two sizes to count as flat."""


@dataclass(frozen=True, kw_only=True)
class StorageBenchConfig:
    sizes: tuple[int, int] = (64 * MiB, 512 * MiB)
    """Object sizes in bytes: ratios are reported at the larger, flatness across both."""
    s3: bool = True
    """Measure S3 when credentials are configured."""
    workdir: Path | None = None

    def __post_init__(self) -> None:
        small, large = self.sizes
        if not 0 < small < large:
            raise BenchError(f"expected two increasing object sizes, got {self.sizes}")


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """One measurement: ours against its baseline, at each size."""

    name: str
    ours: dict[int, Measurement]
    baseline: dict[int, Measurement]
    """For store-and-hash the baseline is sha256sum and cp together (seconds added, peak of the
    two; external tools' peaks are whole-process, from GNU time)."""

    def ratio(self, size: int) -> float:
        """Our throughput over the baseline's (> 1: faster than the baseline)."""
        return self.baseline[size].seconds / self.ours[size].seconds

    def mib_per_second(self, size: int, which: str = "ours") -> float:
        table = self.ours if which == "ours" else self.baseline
        return size / MiB / table[size].seconds

    @property
    def flat(self) -> bool:
        growth = [self.ours[size].growth_kib for size in sorted(self.ours)]
        return max(growth) - min(growth) <= FLAT_GROWTH_KIB

    def to_dict(self) -> dict[str, Any]:
        large = max(self.ours)
        return {
            "ratio": self.ratio(large),
            "ours_mib_per_s": self.mib_per_second(large),
            "baseline_mib_per_s": self.mib_per_second(large, "baseline"),
            "peak_growth_mib": {
                str(size // MiB): self.ours[size].growth_kib / 1024 for size in sorted(self.ours)
            },
            "baseline_peak_growth_mib": {
                str(size // MiB): self.baseline[size].growth_kib / 1024
                for size in sorted(self.baseline)
            },
            "flat_memory": self.flat,
        }


@dataclass(frozen=True, kw_only=True)
class StorageBenchResult:
    sizes: tuple[int, int]
    comparisons: list[Comparison]
    s3_note: str
    """Empty when S3 was measured, else why not."""

    def by_name(self, name: str) -> Comparison | None:
        return next((c for c in self.comparisons if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"sizes_mib": [s // MiB for s in self.sizes]}
        for name in ("store_and_hash", "s3_upload", "s3_download", "api_download"):
            comparison = self.by_name(name)
            result[name] = comparison.to_dict() if comparison else self.s3_note
        store = self.by_name("store_and_hash")
        assert store is not None  # always measured
        result["targets"] = {
            "store_and_hash_ratio": {
                "target": STORE_AND_HASH_TARGET,
                "met": store.ratio(max(self.sizes)) >= STORE_AND_HASH_TARGET,
            },
            "flat_memory": {"met": all(c.flat for c in self.comparisons)},
        }
        return result

    def lines(self) -> list[str]:
        large = max(self.sizes)
        out = [
            f"storage, {large // MiB} MiB objects (memory also at {min(self.sizes) // MiB} MiB)",
            f"  {'':15} {'ratio':>6} {'ours MiB/s':>11} {'baseline':>9}  peak growth (MiB)  memory",
        ]
        for comparison in self.comparisons:
            growth = " / ".join(
                f"{comparison.ours[s].growth_kib / 1024:.1f}" for s in sorted(comparison.ours)
            )
            out.append(
                f"  {comparison.name:15} {comparison.ratio(large):6.2f} "
                f"{comparison.mib_per_second(large):11.0f} "
                f"{comparison.mib_per_second(large, 'baseline'):9.0f}  "
                f"{growth:17}  {'flat' if comparison.flat else 'GROWS'}"
            )
        if self.s3_note:
            out.append(f"  S3: {self.s3_note}")
        store = self.by_name("store_and_hash")
        assert store is not None
        met = store.ratio(large) >= STORE_AND_HASH_TARGET
        out.append(
            f"  store-and-hash target >= {STORE_AND_HASH_TARGET}: {'met' if met else 'MISSED'}"
        )
        return out


def s3_environment() -> dict[str, str] | None:
    """AWS_* variables for boto3: the caller's own, else the test server's; None if neither."""
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return {}
    endpoint = os.environ.get("VERITRAIN_TEST_S3_ENDPOINT")
    if not endpoint:
        return None
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": os.environ.get("VERITRAIN_TEST_S3_ACCESS_KEY", ""),
        "AWS_SECRET_ACCESS_KEY": os.environ.get("VERITRAIN_TEST_S3_SECRET_KEY", ""),
        "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
    }


def run_storage_bench(
    config: StorageBenchConfig, *, say: Callable[[str], None] = lambda _: None
) -> StorageBenchResult:
    with scratch_dir(config.workdir, prefix="veritrain-bench-storage-") as workdir:
        sources = {
            size: _payload(workdir / f"payload-{size // MiB}MiB.bin", size) for size in config.sizes
        }
        say("store-and-hash against sha256sum + cp")
        store_and_hash, digests = _store_and_hash(workdir, sources)
        say("API downloads against reading the file")
        comparisons = [store_and_hash, _api_download(workdir, digests)]
        environment = s3_environment() if config.s3 else None
        note = (
            ""
            if environment is not None
            else "skipped: no S3 configured (AWS_* or VERITRAIN_TEST_S3_*)"
        )
        if environment is not None:
            say("S3 transfers against plain boto3")
            comparisons += _s3(workdir, sources, environment)
    return StorageBenchResult(sizes=config.sizes, comparisons=comparisons, s3_note=note)


def _store_and_hash(
    workdir: Path, sources: Mapping[int, Path]
) -> tuple[Comparison, tuple[Path, dict[int, str]]]:
    ours: dict[int, Measurement] = {}
    baseline: dict[int, Measurement] = {}
    stored: dict[int, str] = {}
    store = workdir / "store"  # one store: each size is a different object, never a no-op put
    for size, source in sources.items():
        copy = workdir / "copy.bin"
        hashed, copied = (
            command(["sha256sum", str(source)]),
            command(["cp", str(source), str(copy)]),
        )
        copy.unlink()
        baseline[size] = Measurement(
            seconds=hashed.seconds + copied.seconds,
            peak_kib=max(hashed.peak_kib, copied.peak_kib),
            baseline_kib=0,
        )
        ours[size] = probe("store-put", f"file://{store}", str(source))
        stored[size] = _digest_of(source)
    return Comparison(name="store_and_hash", ours=ours, baseline=baseline), (store, stored)


def _api_download(workdir: Path, stored: tuple[Path, Mapping[int, str]]) -> Comparison:
    """One server for both sizes (each client probe warms it up with a HEAD first)."""
    ours: dict[int, Measurement] = {}
    baseline: dict[int, Measurement] = {}
    out = workdir / "download.bin"
    store, digests = stored
    database = f"sqlite:///{workdir / 'api.db'}"
    upgrade(database)
    env = {
        "VERITRAIN_DATABASE_URL": database,
        "VERITRAIN_STORE_URL": f"file://{store}",
        "VERITRAIN_DATA_DIR": str(workdir),
    }
    with served(env, log=workdir / "serve.log") as base:
        for size, digest in digests.items():
            ours[size] = probe("http-get", f"{base}/api/v1/objects/{digest}", str(out))
            baseline[size] = probe("copy-file", str(store / "sha256" / digest), str(out))
            out.unlink()
    return Comparison(name="api_download", ours=ours, baseline=baseline)


def _s3(
    workdir: Path, sources: Mapping[int, Path], environment: Mapping[str, str]
) -> list[Comparison]:
    upload: dict[str, dict[int, Measurement]] = {"ours": {}, "baseline": {}}
    download: dict[str, dict[int, Measurement]] = {"ours": {}, "baseline": {}}
    out = workdir / "download.bin"
    with _scratch_bucket(environment) as bucket:
        for size, source in sources.items():
            prefix = f"s3://{bucket}/store-{size // MiB}"
            upload["baseline"][size] = probe(
                "boto3-upload", bucket, f"plain/{size}", str(source), env=environment
            )
            upload["ours"][size] = probe("store-put-file", prefix, str(source), env=environment)
            download["baseline"][size] = probe(
                "boto3-download", bucket, f"plain/{size}", str(out), env=environment
            )
            download["ours"][size] = probe(
                "store-get", prefix, _digest_of(source), str(out), env=environment
            )
            out.unlink()
    return [
        Comparison(name="s3_upload", ours=upload["ours"], baseline=upload["baseline"]),
        Comparison(name="s3_download", ours=download["ours"], baseline=download["baseline"]),
    ]


@contextlib.contextmanager
def _scratch_bucket(environment: Mapping[str, str]) -> Iterator[str]:
    """A new bucket, emptied and deleted afterwards (SeaweedFS backs each bucket with its own
    volumes and runs out after about a hundred)."""
    saved = {k: os.environ.get(k) for k in environment}
    os.environ.update(environment)
    try:
        from storage.s3 import s3_client

        client = s3_client()
        bucket = f"vt-bench-{uuid.uuid4().hex[:12]}"
        client.create_bucket(Bucket=bucket)
        try:
            yield bucket
        finally:
            for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
                client.abort_multipart_upload(
                    Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                )
            paginator = client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=bucket):
                for item in page.get("Contents", []):
                    client.delete_object(Bucket=bucket, Key=item["Key"])
            client.delete_bucket(Bucket=bucket)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _payload(path: Path, size: int) -> Path:
    """``size`` random bytes (incompressible, so no layer can shortcut them), left in the page
    cache by the write so every reader starts from the same place."""
    with open(path, "wb") as sink:
        remaining = size
        while remaining:
            block = min(CHUNK, remaining)
            sink.write(os.urandom(block))
            remaining -= block
    return path


def _digest_of(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()
