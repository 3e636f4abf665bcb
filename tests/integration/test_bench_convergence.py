"""``veritrain bench convergence --quick``: the loss gap to AllReduce, outer step by outer step,
for DiLoCo and DiLoCoX trained on the same windows, and the plot docs/benchmarks.md shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from unit.veritrain_in_process import run_veritrain

pytestmark = pytest.mark.integration


def test_quick_study_reports_each_methods_gap_per_outer_step_and_draws_it(tmp_path: Path):
    plot = tmp_path / "gap.png"
    completed = run_veritrain(
        [
            "bench",
            "convergence",
            "--quick",
            "--json",
            "--seed",
            "0",
            "--outer-steps",
            "3",
            "--inner-steps",
            "4",
            "--plot",
            str(plot),
        ],
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr
    data = json.loads(completed.stdout)
    arms = {arm["name"]: arm for arm in data["arms"]}
    assert list(arms) == ["allreduce", "diloco", "dilocox"]
    # The tiny preset's first round spans its warm-up: T = 3 x H = 4 are rounds of 6, 3 and 3.
    assert data["schedule"] == {"outer_steps": 3, "inner_steps": 4, "rounds": [6, 3, 3]}
    # AllReduce is the reference: no gap to itself, at every outer step.
    assert arms["allreduce"]["seeds"]["0"]["gap"] == [0.0, 0.0, 0.0]
    for name in ("diloco", "dilocox"):
        seed0 = arms[name]["seeds"]["0"]
        assert len(seed0["gap"]) == 3, name
        # The gap is the held-out loss against AllReduce's at the same inner step.
        reference = dict((step, loss) for step, loss in arms["allreduce"]["seeds"]["0"]["curve"])
        step, loss = seed0["curve"][-1]
        assert seed0["gap"][-1] == pytest.approx(loss / reference[step] - 1.0)
    # DiLoCo sends an fp32 pseudo-gradient every H steps: H x fewer bytes than AllReduce, and
    # DiLoCoX compresses it further.
    assert arms["diloco"]["bytes_ratio"] == pytest.approx(4.0)
    assert arms["dilocox"]["bytes_ratio"] > 10 * arms["diloco"]["bytes_ratio"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The inner schedule every arm trained with is reported: the preset's.
    assert data["inner"] == {"lr": 6e-3, "warmup_steps": 120, "beta1": 0.8}
    # The held-out loss is read over every held-out window (whole batches of 8 windows of 64
    # tokens: 504 of tiny's 510), not over the preset's first 4 batches (2,048 tokens of one file).
    assert data["eval_tokens"] == 504 * 64
    assert "held-out loss over 32,256 tokens" in completed.stderr


def test_rounds_of_unequal_length_and_the_inner_schedule_are_options(tmp_path: Path):
    """``--rounds`` trains rounds of the given lengths (the same tokens as T x H when they add
    up to it) and ``--inner-lr`` / ``--warmup-steps`` / ``--beta1`` set every arm's inner
    optimiser: how docs/benchmarks.md's baseline grids and first-round lever are re-run."""
    completed = run_veritrain(
        [
            "bench",
            "convergence",
            "--json",
            "--seed",
            "0",
            "--arm",
            "dilocox",
            "--rounds",
            "6,3,3",
            "--inner-lr",
            "2e-3",
            "--warmup-steps",
            "3",
            "--beta1",
            "0.7",
        ],
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr
    data = json.loads(completed.stdout)
    assert data["schedule"] == {"outer_steps": 3, "inner_steps": 4, "rounds": [6, 3, 3]}
    assert data["inner"] == {"lr": 2e-3, "warmup_steps": 3, "beta1": 0.7}
    arms = {arm["name"]: arm for arm in data["arms"]}
    assert list(arms) == ["allreduce", "dilocox"]
    # Every arm is evaluated where each round ends, AllReduce too, so the gaps are at equal tokens.
    for arm in arms.values():
        assert [step for step, _ in arm["seeds"]["0"]["curve"]] == [6, 9, 12]
    assert (
        "T=3 rounds of H=6,3,3, inner lr 0.002 after 3 warm-up steps, beta1 0.7" in completed.stderr
    )
