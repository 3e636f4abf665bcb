"""Check 2 of ``veritrain verify`` beyond the hash chain: entries read as their typed records,
in the run's layout, with times that only move forward -- reported per entry, never as a
traceback, even without a verified tree head."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ledger.envelope import build_body
from ledger.merkle import leaf_hash
from veritrain.audit.verify.log_checks import check_chain
from veritrain.audit.verify.report import Report
from veritrain.sources.recorded_run import RecordedRun

EXAMPLES = json.loads(
    (Path(__file__).resolve().parents[1] / "records" / "examples.json").read_text()
)


def _log(entries: list[tuple[str, dict[str, Any], datetime]]) -> RecordedRun:
    bodies: list[bytes] = []
    for index, (kind, payload, moment) in enumerate(entries):
        prev = leaf_hash(bodies[-1]) if bodies else None
        bodies.append(
            build_body(
                kind=kind, run_id="r1", index=index, prev=prev, recorded_at=moment, payload=payload
            )
        )
    return RecordedRun.from_bodies("r1", bodies)


def _failures(run: RecordedRun) -> list[tuple[int | None, str]]:
    report = Report(run_id="r1", source="test")
    check_chain(report, run, None, None)
    return [(f.index, f.message) for f in report.results[2].failures]


T0 = datetime(2026, 6, 1, tzinfo=UTC)


def test_a_time_that_goes_backwards_is_named() -> None:
    run = _log(
        [
            ("run.genesis", EXAMPLES["run.genesis"], T0),
            ("data.manifest", EXAMPLES["data.manifest"], T0 + timedelta(seconds=1)),
            ("outer_step", EXAMPLES["outer_step"], T0),
        ]
    )

    failures = _failures(run)
    assert any(
        index == 2 and "recorded_at went backwards" in message for index, message in failures
    ), failures


def test_a_malformed_payload_and_a_misplaced_step_are_named_by_entry() -> None:
    broken = {**EXAMPLES["outer_step"], "step": "two"}
    run = _log(
        [
            ("run.genesis", EXAMPLES["run.genesis"], T0),
            ("data.manifest", EXAMPLES["data.manifest"], T0 + timedelta(seconds=1)),
            (
                "outer_step",
                EXAMPLES["outer_step"],
                T0 + timedelta(seconds=2),
            ),  # records step 1 at step 0's place
            ("outer_step", broken, T0 + timedelta(seconds=3)),
        ]
    )

    failures = dict(_failures(run)[1:])  # [0]: no verified tree head
    assert "expected outer step 0 at entry 2" in failures[2]
    assert "entry 3 (outer_step): field step: expected an integer, got 'two'" in failures[3]
