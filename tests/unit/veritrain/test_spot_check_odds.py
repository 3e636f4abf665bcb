"""The odds ``veritrain audit --sample K`` reports (veritrain/audit/spot_check.py)."""

from __future__ import annotations

import random

import pytest

from veritrain.audit.spot_check import catch_probability, draw_pairs
from veritrain.errors import ReproduceError


def test_catch_probability_is_hypergeometric() -> None:
    # 4 clusters x 5 steps; one cluster lazy in all 5 of its steps.
    assert catch_probability(20, 5, 1) == pytest.approx(5 / 20)
    assert catch_probability(20, 5, 2) == pytest.approx(1 - (15 * 14) / (20 * 19))
    assert catch_probability(20, 5, 16) == 1.0  # 16 draws cannot all miss 5 of 20
    assert catch_probability(20, 0, 10) == 0.0
    assert catch_probability(20, 5, 99) == 1.0


def test_draws_are_distinct_and_in_step_order() -> None:
    pairs = [(t, c) for t in range(5) for c in range(4)]
    drawn = draw_pairs(pairs, 7, random.Random(3))
    assert len(set(drawn)) == 7 and drawn == sorted(drawn)
    assert draw_pairs(pairs, 50, random.Random(3)) == pairs
    with pytest.raises(ReproduceError, match="at least 1 pair, got 0"):
        draw_pairs(pairs, 0, random.Random(3))
