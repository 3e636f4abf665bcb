"""``veritrain bench ledger`` in a tiny mode: real appends on SQLite and PostgreSQL, the
verifier's log checks on the synthetic run, and inclusion proofs from `veritrain serve` in its
own process. Not a timed test: the targets live in the bench's own output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from unit.veritrain_in_process import run_veritrain

from veritrain.bench.ledger import LedgerBenchConfig, run_ledger_bench

pytestmark = pytest.mark.integration


def test_tiny_ledger_bench_on_sqlite_and_postgres(tmp_path: Path, postgres_url: str) -> None:
    result = run_ledger_bench(
        LedgerBenchConfig(
            verify_entries=40,
            postgres_appends=10,
            clients=4,
            requests_per_client=5,
            postgres_url=postgres_url,
            workdir=tmp_path,
        )
    )
    data = result.to_dict()
    assert (
        data["appends"]["sqlite"]["appends"] == 38
    )  # the outer steps (genesis and manifest aside)
    assert data["appends"]["postgres"]["appends"] == 10
    # The synthetic run is a valid log: checks 1-3 and 9 pass on it.
    assert result.verify.passed and data["verify"]["entries"] == 40
    assert set(data["verify"]["phases"]) == {
        "fetch and parse",
        "1 tree head",
        "2 chain and root",
        "3 inclusion proofs",
        "9 metrics",
    }
    proofs = data["inclusion_proof"]
    assert proofs["requests"] == 20 and proofs["errors"] == 0
    assert 0 < proofs["p50_ms"] <= proofs["p99_ms"] <= proofs["max_ms"]


def test_cli_json_without_postgres(tmp_path: Path) -> None:
    # In the test's process, with no VERITRAIN_* variable: no PostgreSQL is named.
    completed = run_veritrain(
        [
            "bench",
            "ledger",
            "--json",
            "--entries",
            "20",
            "--clients",
            "2",
            "--requests",
            "2",
            "--workdir",
            str(tmp_path),
        ],
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr
    data = json.loads(completed.stdout)
    assert data["appends"]["postgres"].startswith("skipped: no PostgreSQL")
    assert data["verify"]["passed"] is True
    assert set(data["targets"]) == {"sqlite_appends_per_second", "verify_seconds", "proof_p99_ms"}
