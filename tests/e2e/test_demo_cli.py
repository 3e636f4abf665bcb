"""The README's promise, through the real CLI: `veritrain demo --no-serve` (the installed script,
in a subprocess, from an empty directory), then `veritrain verify` and `veritrain reproduce` in
the same directory with no flags (the same entry point, run in the test's process:
unit/veritrain_in_process.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from unit.veritrain_in_process import run_veritrain


def _run(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    veritrain = shutil.which("veritrain", path=str(Path(sys.executable).parent))
    assert veritrain is not None
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("VERITRAIN_")
    }  # embedded defaults
    env["VERITRAIN_WITNESS_DIR"] = str(cwd / "witness")
    env["COLUMNS"] = "200"
    return subprocess.run(
        [veritrain, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def _run_in_process(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """:func:`_run`'s command and environment, in this process."""
    return run_veritrain(
        args, cwd=cwd, env={"VERITRAIN_WITNESS_DIR": str(cwd / "witness"), "COLUMNS": "200"}
    )


@pytest.mark.slow
def test_demo_then_verify_and_reproduce_in_the_same_directory(tmp_path: Path) -> None:
    # 3 outer steps of H = 8 instead of the preset's 6 x 20: every stage of the demo (the
    # short overlap, step 2's re-execution of an apply that landed mid-round) at a fifth of the
    # work.
    demo = _run(["demo", "--no-serve", "--outer-steps", "3", "--inner-steps", "8"], tmp_path)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "VERIFIED" in demo.stdout and "MATCH" in demo.stdout
    assert "3 outer steps of H=8" in demo.stdout
    assert (tmp_path / "veritrain-data" / "ledger.db").is_file()
    run_id = re.search(r"run (demo-\d{8}-\d{6})", demo.stdout)
    assert run_id is not None

    verify = _run_in_process(["verify"], tmp_path)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"VERIFIED: run '{run_id.group(1)}'" in verify.stdout

    reproduce = _run_in_process(["reproduce", run_id.group(1), "--step", "2"], tmp_path)
    assert reproduce.returncode == 0, reproduce.stdout + reproduce.stderr
    assert "(bitwise comparison)" in reproduce.stdout
    assert reproduce.stdout.rstrip().endswith("MATCH") and "MISMATCH" not in reproduce.stdout

    runs = _run_in_process(["runs"], tmp_path)
    assert run_id.group(1) in runs.stdout and "finished" in runs.stdout


def test_verify_without_a_ledger_says_what_to_do(tmp_path: Path) -> None:
    result = _run_in_process(["verify"], tmp_path)
    assert result.returncode != 0
    assert (
        result.stderr.startswith("veritrain: error: there is no ledger")
        and "veritrain demo" in result.stderr
    )
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "veritrain-data").exists(), "verify must not create an empty ledger"
