"""A 1 GiB object goes into the store and back with under 128 MiB of peak memory growth,
measured in a fresh process (its VmHWM, the kernel's resident-memory high-water mark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from unit.storage.payloads import GiB, local_or_s3_store, payload_digest

MiB = 1 << 20
TESTS = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).with_name("storage_memory_probe.py")


@pytest.fixture(scope="module")
def expected_digest() -> str:
    return payload_digest(GiB, seed=42)


@pytest.fixture(params=["local", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from local_or_s3_store(request, tmp_path)


@pytest.mark.slow
def test_a_1_gib_object_round_trips_in_under_128_mib(
    store_url: str, expected_digest: str, tmp_path: Path
) -> None:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    )
    env["TMPDIR"] = str(tmp_path)  # the S3 store spools here
    result = subprocess.run(
        [sys.executable, str(PROBE), store_url, str(GiB)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=540,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])

    assert report["digest"] == expected_digest
    assert report["read_digest"] == expected_digest
    assert report["size"] == GiB
    put_growth = (report["after_put_kib"] - report["baseline_kib"]) * 1024
    read_growth = (report["after_read_kib"] - report["baseline_kib"]) * 1024
    assert put_growth < 128 * MiB, f"put grew peak memory by {put_growth / MiB:.0f} MiB"
    assert read_growth < 128 * MiB, f"put + read grew peak memory by {read_growth / MiB:.0f} MiB"
