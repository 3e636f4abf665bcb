"""``veritrain bench storage`` in a tiny mode: every comparison measured in fresh processes,
S3 against the real SeaweedFS (a scratch bucket, deleted afterwards). Not a timed test."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from real_servers import S3Server
from unit.veritrain_in_process import run_veritrain

from veritrain.bench.storage import MiB, StorageBenchConfig, run_storage_bench

pytestmark = pytest.mark.integration


def bench_buckets(s3_server: S3Server) -> set[str]:
    """The bench's scratch buckets (``vt-bench-<uuid>``): tests running beside this one make and
    delete buckets of their own."""
    names = {b["Name"] for b in s3_server.client().list_buckets()["Buckets"]}
    return {name for name in names if name.startswith("vt-bench-")}


def test_tiny_storage_bench_with_s3(tmp_path: Path, s3_server: S3Server) -> None:
    buckets_before = bench_buckets(s3_server)
    result = run_storage_bench(StorageBenchConfig(sizes=(1 * MiB, 4 * MiB), workdir=tmp_path))
    data = result.to_dict()
    for name in ("store_and_hash", "api_download", "s3_upload", "s3_download"):
        entry = data[name]
        assert (
            entry["ratio"] > 0 and entry["ours_mib_per_s"] > 0 and entry["baseline_mib_per_s"] > 0
        ), name
        assert set(entry["peak_growth_mib"]) == {"1", "4"}
    assert bench_buckets(s3_server) == buckets_before  # its scratch bucket is gone
    # The store (one for both sizes, served by one API server) really holds each payload, named
    # by its SHA-256 (besides the probe's warm-up object).
    for size in (1, 4):
        payload = (tmp_path / f"payload-{size}MiB.bin").read_bytes()
        stored = tmp_path / "store" / "sha256" / hashlib.sha256(payload).hexdigest()
        assert stored.read_bytes() == payload


def test_cli_json_without_s3(tmp_path: Path) -> None:
    completed = run_veritrain(
        [
            "bench",
            "storage",
            "--json",
            "--size-mib",
            "2",
            "--no-s3",
            "--workdir",
            str(tmp_path),
        ],
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr
    data = json.loads(completed.stdout)
    assert data["s3_upload"].startswith("skipped")
    assert data["sizes_mib"][1] == 2
