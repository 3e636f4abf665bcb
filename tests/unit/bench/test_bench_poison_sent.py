"""``veritrain bench poison``: scaled, noise and sign-flipped contributions are each caught in every
round they are active, by the rule that should catch them, and left out of the mean
(tests/unit/bench/poison_bench_setup.py has the shrunk set-up; the attacks are split over
files so that parallel test workers run them side by side)."""

from __future__ import annotations

import pytest
from poison_bench_setup import Setup, assert_caught_in_every_active_round, poison_setup

from veritrain.bench.poison_run import Scenario


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    return poison_setup(tmp_path_factory.mktemp("poison-data"))


@pytest.mark.parametrize(
    ("scenario", "rule"),
    [
        ("scale", "large_norm"),
        ("noise", "direction"),
        ("sign_flip", "direction"),
    ],
)
def test_each_attack_is_caught_and_excluded_in_every_round_it_is_active(
    scenario: Scenario, rule: str, setup: Setup
) -> None:
    assert_caught_in_every_active_round(setup, scenario, rule)
