"""A step recorded in model-repo format 1 (tests/fixtures/v1-0313592, before the tokenizer files
named their special tokens) re-executes to a MATCH: reproduce writes format 2 and judges the
recorded config.json, generation_config.json and tokenizer_config.json by what format 1 wrote
(trainer/hf_repo.py ``as_format_1``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from unit.veritrain_in_process import run_veritrain

from ledger.db import upgrade

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "v1-0313592"

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_step_recorded_in_repo_format_1_reproduces(tmp_path: Path) -> None:
    data = tmp_path / "veritrain-data"
    shutil.copytree(FIXTURE, data)
    for path in data.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    upgrade(f"sqlite:///{data / 'ledger.db'}")
    result = run_veritrain(
        ["reproduce", "v1-0313592", "--step", "1"],
        cwd=tmp_path,
        env={"VERITRAIN_DATA_DIR": str(data), "COLUMNS": "200"},
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("MATCH"), result.stdout
    judged = [line.split()[1] for line in result.stdout.splitlines() if "format 1" in line]
    assert judged == ["config.json:", "generation_config.json:", "tokenizer_config.json:"]
