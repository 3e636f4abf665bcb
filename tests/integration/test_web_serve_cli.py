"""``veritrain serve`` as a user runs it: a separate process on the configured ledger and
store, printing the URL it serves, answering, and stopping on SIGINT (Ctrl+C)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from unit.web.web_fixture_run import record_demo_run

from veritrain.bench.server import free_port

VERITRAIN = Path(sys.executable).with_name("veritrain")


@pytest.mark.parametrize("workers", [1, 2])
def test_veritrain_serve_prints_its_url_serves_the_run_and_stops_on_ctrl_c(
    tmp_path: Path, workers: int
) -> None:
    run = record_demo_run(
        f"sqlite:///{tmp_path / 'ledger.db'}", f"file://{tmp_path / 'objects'}", steps=1
    )
    port = free_port()
    env = dict(
        os.environ,
        VERITRAIN_DATABASE_URL=run.database_url,
        VERITRAIN_STORE_URL=run.store_url,
        VERITRAIN_ORIGIN=run.origin,
    )
    process = subprocess.Popen(
        [str(VERITRAIN), "serve", "--port", str(port), "--workers", str(workers)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        first_line = process.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in first_line
        deadline = time.monotonic() + 60
        while True:
            try:
                runs = httpx.get(f"http://127.0.0.1:{port}/api/v1/runs", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server never answered"
                time.sleep(0.2)
        assert [r["run_id"] for r in runs.json()["runs"]] == [run.run_id]
        # Every worker answers from the same ledger: a burst of proof requests all succeed.
        for index in range(8):
            proof = httpx.get(
                f"http://127.0.0.1:{port}/api/v1/runs/{run.run_id}/log/proof/inclusion",
                params={"index": index % 2},
                timeout=5,
            )
            assert proof.status_code == 200 and proof.json()["index"] == index % 2
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130  # the shell's status for a Ctrl+C'd command
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
