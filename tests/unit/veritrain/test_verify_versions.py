"""Check 10 judges a run by the versions and rules it was recorded with (docs/records.md,
"Versions"), on the genesis veritrain 0313592 recorded (tests/fixtures/v1-0313592)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from attestation.canonical import canonical_digest, canonical_json
from records.rules import RULES_V1
from veritrain.audit.verify.commitment_checks import check_genesis
from veritrain.audit.verify.report import Report
from veritrain.sources.recorded_run import RecordedRun

V1_RUN = Path(__file__).resolve().parents[2] / "fixtures" / "v1-0313592" / "ledger.db"
RUN_ID = "v1-0313592"


def genesis_check(edit: Callable[[dict[str, Any]], None]) -> list[str]:
    """Check 10's failures on the v1 run, its genesis payload edited by ``edit`` (the config
    digest recomputed, so what is judged is the edit itself)."""
    db = sqlite3.connect(f"file:{V1_RUN}?immutable=1", uri=True)
    try:
        bodies = [body for (body,) in db.execute("SELECT body FROM entries ORDER BY idx")]
    finally:
        db.close()
    document = json.loads(bodies[0])
    edit(document["payload"])
    document["payload"]["config_digest"] = canonical_digest(document["payload"]["hyperparameters"])
    bodies[0] = canonical_json(document)
    report = Report(run_id=RUN_ID, source="the v1 fixture")
    check_genesis(report, RecordedRun.from_bodies(RUN_ID, bodies))
    return [f.message for f in report.results[10].failures]


def unchanged(payload: dict[str, Any]) -> None:
    pass


def test_the_v1_genesis_passes_check_10_by_the_rules_it_implies() -> None:
    assert genesis_check(unchanged) == []


def test_a_configuration_field_added_after_the_run_does_not_fail_an_old_run() -> None:
    def written_before_the_field_existed(payload: dict[str, Any]) -> None:
        del payload["hyperparameters"]["outer"]["anomaly_own_batches"]

    failures = genesis_check(written_before_the_field_existed)

    # The edit changes the config digest, which the TEE reference and the clusters' enrolments
    # name; the configuration itself reads back as recorded, its new field at its default.
    assert failures, "the edited config digest must be caught"
    assert [f for f in failures if "hyperparameters" in f] == [], failures


@pytest.mark.parametrize(
    ("rules", "refused"),
    [
        ({"verdict": "veritrain.verdict/v9"}, ["verdict rule 'veritrain.verdict/v9'"]),
        (
            {"assignment": "veritrain.shuffle/v1", "commitments": "veritrain.sketch/v2"},
            ["assignment rule 'veritrain.shuffle/v1'", "commitments rule 'veritrain.sketch/v2'"],
        ),
    ],
)
def test_a_genesis_naming_a_rule_verify_does_not_implement_is_refused(
    rules: dict[str, str], refused: list[str]
) -> None:
    def name_rules(payload: dict[str, Any]) -> None:
        payload["schema"] = "veritrain/run.genesis/v2"
        payload["rules"] = RULES_V1.to_payload() | rules

    failures = genesis_check(name_rules)

    assert [f.split(", which this veritrain does not implement")[0] for f in failures] == [
        f"the genesis names the {name}" for name in refused
    ]
    assert all(
        f.endswith("the run cannot be judged by its own rules; upgrade veritrain") for f in failures
    )


def test_a_genesis_of_a_newer_version_is_not_judged() -> None:
    def from_the_future(payload: dict[str, Any]) -> None:
        payload["schema"] = "veritrain/run.genesis/v3"

    assert genesis_check(from_the_future) == [
        "the run has no readable genesis: entry 0 (run.genesis): field schema: expected a "
        "version of run.genesis this veritrain reads ('veritrain/run.genesis/v1', "
        "'veritrain/run.genesis/v2'); it was written by a newer veritrain: upgrade to read it, "
        "got 'veritrain/run.genesis/v3'"
    ]
