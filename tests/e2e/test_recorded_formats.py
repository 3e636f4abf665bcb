"""Runs recorded by earlier versions of veritrain still verify (docs/records.md, "Versions").

Each folder of ``tests/fixtures/`` holds one run, recorded once by the commit its README names
(a SQLite ledger and an object folder) and never regenerated. The current code upgrades a copy
of its database, as a user would (``veritrain db upgrade``), and verifies the run in full
through the CLI: every record is read by the reader of its own schema version and judged by the
rules its genesis names (or, before genesis named them, by the rules its schema implies).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from e2e.forger import Forger, Payloads
from unit.veritrain_in_process import run_veritrain

from ledger.db import upgrade
from records.versions import GENESIS
from veritrain.audit.verify import verify_run
from veritrain.settings import Settings
from veritrain.sources import DirectSource
from veritrain.sources.recorded_run import RecordedRun

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
    result = run_veritrain(
        ["verify", run_id, "--no-memory"],
        cwd=tmp_path,
        env={"VERITRAIN_DATA_DIR": str(data), "COLUMNS": "200"},
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"VERIFIED: run '{run_id}'" in result.stdout, result.stdout
    assert "FAIL" not in result.stdout


def test_a_new_run_names_its_rules_in_the_newest_genesis(recorded_run: Settings) -> None:
    with DirectSource(recorded_run) as source:
        run = RecordedRun.load(source)
        report = verify_run(source, run.run_id)

    assert run.genesis.schema == "veritrain/run.genesis/v2" == GENESIS.current
    assert run.genesis.rules.to_payload() == {
        "verdict": "veritrain.verdict/v2",
        "assignment": "veritrain.affine-window-permutation/v1",
        "tolerance": "veritrain.tolerance/v1",
        "commitments": "veritrain.inner-commitments/v1",
    }
    assert report.ok, report.render()


def test_verify_refuses_a_run_that_names_a_rule_it_does_not_implement(
    fresh_run: Settings,
) -> None:
    def name_a_later_verdict_rule(payloads: Payloads) -> Payloads:
        payloads[0][1]["rules"]["verdict"] = "veritrain.verdict/v9"
        return payloads

    with DirectSource(fresh_run) as source:
        run_id = source.latest_run_id()
    Forger(fresh_run, run_id).rewrite(name_a_later_verdict_rule)
    with DirectSource(fresh_run) as source:
        report = verify_run(source, run_id)

    assert not report.ok
    assert [f.message for f in report.results[10].failures] == [
        "the genesis names the verdict rule 'veritrain.verdict/v9', which this veritrain does "
        "not implement (it judges by veritrain.verdict/v1, veritrain.verdict/v2): the run cannot "
        "be judged by its own rules; upgrade veritrain"
    ]
    # Check 7 recomputes the revision files from the configuration, 8 the data ranges, 12 the
    # verdicts: none of them can judge a run whose rules this veritrain does not implement.
    assert [n for n, r in sorted(report.results.items()) if not r.passed] == [7, 8, 10, 12], (
        "only the checks that judge by the genesis' configuration are refused:\n" + report.render()
    )
