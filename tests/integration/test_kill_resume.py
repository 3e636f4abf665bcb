"""Kill-and-resume (issue #5): a run SIGKILLed after an outer step's objects were uploaded but
before its entry was appended resumes with `veritrain train --resume RUN_ID`, and the finished
run verifies with no gap and no duplicate -- and equals an uninterrupted run bit for bit (the
session's shared recorded run, ``e2e.recorded_runs``: the same configuration and run id).

The worst moment is reached the way it happens in production, with no hook in the product:
the database becomes unavailable to writers (here the test holds SQLite's write lock), the
recorder stores step 2's objects and then waits to append its entry; the run is killed
while it waits."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from e2e.recorded_runs import (
    OUTER_STEPS,
    RUN_ID,
    config_file,
    copy_run,
    shared_recorded_run,
    small_run_config,
)
from unit.veritrain_in_process import run_veritrain

from ledger.db import create_engine
from ledger.errors import RunNotFoundError, SchemaMissingError
from ledger.service import Ledger
from veritrain.audit.verify import verify_run
from veritrain.audit.verify.seen_heads import SeenHeads
from veritrain.settings import load_settings
from veritrain.sources import DirectSource


def _train_args(folder: Path) -> list[str]:
    """``veritrain train`` of the shared run's configuration (written to a file in ``folder``)."""
    return ["train", "--config", str(config_file(small_run_config(), folder)), "--quiet"]


KILLED_AT = 2


def _veritrain() -> str:
    path = shutil.which("veritrain", path=str(Path(sys.executable).parent))
    assert path is not None
    return path


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "VERITRAIN_DATA_DIR": str(data_dir), **extra}


def _steps(data_dir: Path) -> list[int]:
    """The outer steps recorded so far (none while the run is still creating its ledger)."""
    engine = create_engine(f"sqlite:///{data_dir / 'ledger.db'}")
    try:
        return [e.step for e in Ledger(engine).entries(RUN_ID, 0, 1000) if e.kind == "outer_step"]
    except (SchemaMissingError, RunNotFoundError):
        return []
    finally:
        engine.dispose()


def _manifest_roots(database_url: str) -> list[str]:
    engine = create_engine(database_url)
    try:
        return [
            e.payload["checkpoint"]["manifest_root"]
            for e in Ledger(engine).entries(RUN_ID, 0, 1000)
            if e.kind == "outer_step"
        ]
    finally:
        engine.dispose()


def _objects(data_dir: Path) -> int:
    return sum(1 for _ in (data_dir / "objects" / "sha256").glob("*"))


def test_a_run_killed_mid_upload_resumes_with_no_gap_and_no_duplicate(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    crashed = tmp_path / "crashed"
    process = subprocess.Popen(
        [_veritrain(), *_train_args(tmp_path)],
        env=_env(crashed),
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 300
    while not (crashed / "ledger.db").exists() or _steps(crashed) != [0, 1]:
        assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
        assert time.monotonic() < deadline, "the run never recorded step 1"
        time.sleep(0.05)
    # Writers now wait (the recorder's busy timeout is 30 s); readers carry on (WAL).
    lock = sqlite3.connect(crashed / "ledger.db", timeout=30, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    try:
        before = _objects(crashed)
        stable_since, count = time.monotonic(), before
        while count == before or time.monotonic() - stable_since < 3:  # step 2 stored its objects
            assert process.poll() is None, "the run ended while the ledger was locked"
            assert time.monotonic() < deadline, "step 2 never stored its objects"
            time.sleep(0.1)
            if (now := _objects(crashed)) != count:
                count, stable_since = now, time.monotonic()
        os.killpg(process.pid, signal.SIGKILL)  # the whole process group: launcher and every rank
        process.wait(timeout=60)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert _steps(crashed) == [0, 1], "the killed step must not be recorded"

    resumed = subprocess.run(
        [_veritrain(), "train", "--resume", RUN_ID, "--quiet"],
        env=_env(crashed),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert _steps(crashed) == list(range(OUTER_STEPS))

    source = DirectSource(load_settings(data_dir=crashed))
    try:
        report = verify_run(source, RUN_ID, seen_heads=SeenHeads(tmp_path / "witness"))
    finally:
        source.close()
    assert report.ok, report.render()
    assert report.summary["finished"] is True

    uninterrupted = shared_recorded_run(tmp_path_factory)
    crashed_roots = _manifest_roots(f"sqlite:///{crashed / 'ledger.db'}")
    assert crashed_roots == _manifest_roots(uninterrupted.database_url)


def test_resuming_an_unknown_run_says_so(tmp_path: Path) -> None:
    result = run_veritrain(
        ["train", "--resume", "nope"], cwd=tmp_path, env={"VERITRAIN_DATA_DIR": str(tmp_path)}
    )
    assert result.returncode != 0
    assert "cannot resume 'nope'" in result.stderr and "no ledger" in result.stderr
    assert "Traceback" not in result.stderr


def test_resuming_a_run_the_ledger_lacks_names_the_runs_it_holds(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    ledger = copy_run(shared_recorded_run(tmp_path_factory), tmp_path / "data")
    result = run_veritrain(
        ["train", "--resume", "nope"],
        cwd=tmp_path,
        env={"VERITRAIN_DATA_DIR": str(ledger.data_dir)},
    )
    assert result.returncode != 0
    assert "cannot resume 'nope': no run 'nope' in the ledger" in result.stderr
    assert f"its latest runs: {RUN_ID}" in result.stderr
    assert "Traceback" not in result.stderr
