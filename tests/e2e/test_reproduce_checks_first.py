"""``veritrain reproduce`` verifies the log before it re-executes, says which policy it applies
and why, and -- on the machine that trained -- reproduces every step of a run bit for bit,
the last one (which also applies the final round) included."""

from __future__ import annotations

import json
import sqlite3

import pytest
import rfc8785
from e2e.recorded_runs import OUTER_STEPS, RUN_ID

from veritrain.audit.reproduce import reproduce_step
from veritrain.errors import ReproduceError
from veritrain.settings import Settings
from veritrain.sources import DirectSource


def test_a_database_edit_is_refused_before_anything_is_re_executed(fresh_run: Settings) -> None:
    """Step 3 pointed at step 2's checkpoint and a loose tolerance policy: without the log
    check this reproduced as MATCH (the tolerance metric still agreed)."""
    db = sqlite3.connect(fresh_run.database_url.removeprefix("sqlite:///"))
    with db:
        rows = dict(db.execute("select idx, body from entries where idx in (0, 4, 5)").fetchall())
        genesis, step2, step3 = (json.loads(rows[i]) for i in (0, 4, 5))
        step3["payload"]["checkpoint"] = step2["payload"]["checkpoint"]
        genesis["payload"]["verification_policy"]["mode"] = "tolerance"
        for index, document in ((0, genesis), (5, step3)):
            db.execute(
                "update entries set body = ? where idx = ?", (rfc8785.dumps(document), index)
            )
    db.close()

    with (
        DirectSource(fresh_run) as source,
        pytest.raises(ReproduceError, match="the log does not verify") as raised,
    ):
        reproduce_step(source, RUN_ID, 3)
    assert "entry 0" in str(raised.value) or "entry 1" in str(raised.value)


@pytest.mark.slow
@pytest.mark.parametrize("step", range(OUTER_STEPS))
def test_every_step_reproduces_bitwise_on_the_machine_that_trained(
    step: int, recorded_run: Settings
) -> None:
    with DirectSource(recorded_run) as source:
        comparison = reproduce_step(source, RUN_ID, step)

    assert comparison.ok, comparison.render()
    assert comparison.mode == "bitwise"
    assert "this machine is in its hardware class" in comparison.reason
    assert any(
        m.endswith(
            "metrics equal (all but the measured times ['comm_seconds', 'compute_seconds', "
            "'exposed_comm_seconds', 'quorum_seconds', 'wall_seconds'])"
        )
        for m in comparison.matched
    ), comparison.render()
