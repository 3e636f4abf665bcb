"""Runs recorded by earlier versions of veritrain still verify (docs/records.md, "Versions").

Each folder of ``tests/fixtures/`` holds one run, recorded once by the commit its README names
(a SQLite ledger and an object folder) and never regenerated. The current code upgrades a copy
of its database, as a user would (``veritrain db upgrade``), and verifies the run in full
through the CLI: every record is read by the reader of its own schema version and judged by the
rules its genesis names (or, before genesis named them, by the rules its schema implies).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.db import upgrade

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RECORDED = sorted(p.name for p in FIXTURES.iterdir() if (p / "ledger.db").is_file())

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_the_first_format_is_kept() -> None:
    assert "v1-0313592" in RECORDED, f"expected the v1 run among {RECORDED}"


@pytest.mark.parametrize("run_id", RECORDED)
def test_a_run_recorded_by_an_earlier_version_verifies(run_id: str, tmp_path: Path) -> None:
    data = tmp_path / "veritrain-data"
    shutil.copytree(FIXTURES / run_id, data)
    for path in data.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    upgrade(f"sqlite:///{data / 'ledger.db'}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERITRAIN_")}
    env |= {"VERITRAIN_DATA_DIR": str(data), "COLUMNS": "200"}

    result = subprocess.run(
        [sys.executable, "-m", "veritrain", "verify", run_id, "--no-memory"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"VERIFIED: run '{run_id}'" in result.stdout, result.stdout
    assert "FAIL" not in result.stdout
