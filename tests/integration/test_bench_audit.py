"""``veritrain bench audit`` in a tiny mode (H = 3), through the command line: every legitimate
execution stays under the published bound and every forged one goes over it. Checks what it
reports, not how fast."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from unit.veritrain_in_process import run_veritrain

from veritrain.policy import CROSS_PRECISION_DISTANCE_BOUND, PARAMETER_DISTANCE_BOUND

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _number(value: float | str) -> float:
    return math.inf if value == "inf" else float(value)


def test_cli_json_separates_legitimate_from_forged_executions(tmp_path: Path) -> None:
    completed = run_veritrain(
        [
            "bench",
            "audit",
            "--json",
            "--inner-steps",
            "3",
            "--workdir",
            str(tmp_path),
        ],
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr
    data = json.loads(completed.stdout)

    assert data["bound"] == PARAMETER_DISTANCE_BOUND
    assert data["cross_precision"]["bound"] == CROSS_PRECISION_DISTANCE_BOUND
    kinds = {p["name"]: p["kind"] for p in data["pairs"]}
    assert sorted(set(kinds.values())) == ["cross-precision", "forged", "legit"]
    # The tiny preset's first round spans its warm-up: T = 4 x H = 3 are rounds of 6, 2, 2 and 2
    # inner steps, so the forger of the audited step 2 skips or misreads that round's last, 1.
    assert [n for n, k in kinds.items() if k == "forged"] == [
        "skip inner step 1",
        "other data window at inner step 1",
        "inner lr x1.1",
        "contribution x1.05",
        "stale round (state of a round earlier)",
    ]
    scores = {p["name"]: _number(p["score"]) for p in data["pairs"]}
    assert _number(data["legit_max"]) == max(s for n, s in scores.items() if kinds[n] == "legit")
    assert _number(data["forged_min"]) == min(s for n, s in scores.items() if kinds[n] == "forged")
    assert _number(data["legit_max"]) < PARAMETER_DISTANCE_BOUND < _number(data["forged_min"])
    assert data["every_forgery_flagged"] is True and data["no_legit_flagged"] is True
    stale = next(p for p in data["pairs"] if p["name"].startswith("stale"))
    assert stale["start_agrees"] is False  # named as not starting from the recorded state
    assert len(data["distributions"]["legit"]) > 0 and len(data["distributions"]["forged"]) > 0
