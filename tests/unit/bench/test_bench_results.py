"""Result assembly of the ledger and storage benchmarks, and the statistics they use."""

from __future__ import annotations

import pytest

from veritrain.bench.ledger import (
    AppendThroughput,
    LedgerBenchConfig,
    LedgerBenchResult,
    ProofLatency,
    VerifyTiming,
)
from veritrain.bench.memory_probe import Measurement
from veritrain.bench.stats import percentile
from veritrain.bench.storage import Comparison, MiB, StorageBenchResult
from veritrain.errors import BenchError


def test_percentiles_interpolate_between_ranks() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([float(v) for v in range(1, 101)], 99) == pytest.approx(99.01)
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(BenchError, match="at least one value"):
        percentile([], 50)


def ledger_result(p99_fast: bool) -> LedgerBenchResult:
    latencies = [10.0] * 99 + [20.0 if p99_fast else 400.0] * 2
    return LedgerBenchResult(
        sqlite=AppendThroughput(backend="sqlite", appends=1000, seconds=4.0),
        postgres=None,
        postgres_note="skipped: no PostgreSQL",
        verify=VerifyTiming(
            entries=10_000, phases={"fetch": 1.0, "3 inclusion proofs": 12.0}, passed=True
        ),
        proofs=ProofLatency(
            clients=32, latencies_ms=latencies, errors=0, seconds=2.0, alone_ms=[3.0, 5.0]
        ),
    )


def test_ledger_result_reports_targets_and_what_dominates() -> None:
    data = ledger_result(p99_fast=True).to_dict()
    assert data["appends"]["sqlite"]["per_second"] == 250.0
    assert data["appends"]["postgres"] == "skipped: no PostgreSQL"
    assert data["verify"]["seconds"] == 13.0 and data["verify"]["dominant"] == "3 inclusion proofs"
    assert data["targets"]["sqlite_appends_per_second"]["met"]
    assert not data["targets"]["verify_seconds"]["met"]
    assert data["targets"]["proof_p99_ms"]["met"]
    assert data["inclusion_proof"]["one_client_p50_ms"] == 4.0
    assert not ledger_result(p99_fast=False).to_dict()["targets"]["proof_p99_ms"]["met"]
    assert any("MISSED" in line for line in ledger_result(p99_fast=True).lines())


def measured(seconds: float, growth_kib: int) -> Measurement:
    return Measurement(seconds=seconds, peak_kib=50_000 + growth_kib, baseline_kib=50_000)


def test_storage_ratio_is_ours_over_the_baseline_and_memory_must_stay_flat() -> None:
    small, large = 8 * MiB, 64 * MiB
    flat = Comparison(
        name="store_and_hash",
        ours={small: measured(0.1, 2048), large: measured(1.0, 3000)},
        baseline={small: measured(0.08, 0), large: measured(0.9, 0)},
    )
    assert flat.ratio(large) == pytest.approx(0.9)
    assert flat.mib_per_second(large) == pytest.approx(64.0)
    assert flat.flat
    growing = Comparison(
        name="s3_upload",
        ours={small: measured(0.1, 8 * 1024), large: measured(1.0, 64 * 1024)},
        baseline={small: measured(0.1, 0), large: measured(1.0, 0)},
    )
    assert not growing.flat
    data = StorageBenchResult(
        sizes=(small, large), comparisons=[flat, growing], s3_note=""
    ).to_dict()
    assert data["targets"]["store_and_hash_ratio"]["met"]
    assert not data["targets"]["flat_memory"]["met"]
    assert data["s3_download"] == ""  # not measured in this result


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"verify_entries": 2}, "at least 3 entries"),
        ({"clients": 0}, "client"),
        ({"server_workers": 0}, "server worker"),
    ],
)
def test_bad_ledger_bench_settings_are_refused(fields: dict[str, int], message: str) -> None:
    with pytest.raises(BenchError, match=message):
        LedgerBenchConfig(**fields)
