"""Adaptive H: enough inner steps to hide the exchange, no more."""

from __future__ import annotations

import pytest

from trainer.errors import ConfigError
from trainer.outer import next_inner_steps


def test_exposed_exchange_jumps_to_the_hiding_h_with_headroom():
    # 10 s of exchange, 0.1 s per step: 100 steps hide it exactly; 20% headroom -> 120.
    assert (
        next_inner_steps(
            50, comm_seconds=10.0, compute_seconds_per_step=0.1, min_steps=1, max_steps=1000
        )
        == 120
    )


def test_more_than_needed_shrinks_by_at_most_a_quarter_per_round():
    h = 400
    seen = []
    for _ in range(4):
        h = next_inner_steps(
            h, comm_seconds=1.0, compute_seconds_per_step=0.1, min_steps=1, max_steps=1000
        )
        seen.append(h)
    assert seen == [300, 225, 169, 127]
    for _ in range(20):
        h = next_inner_steps(
            h, comm_seconds=1.0, compute_seconds_per_step=0.1, min_steps=1, max_steps=1000
        )
    assert h == 12  # settles at ceil(1.2 * 1.0 / 0.1)


def test_result_is_clamped_to_the_bounds():
    kwargs = {"compute_seconds_per_step": 0.01, "min_steps": 5, "max_steps": 50}
    assert next_inner_steps(20, comm_seconds=100.0, **kwargs) == 50
    assert next_inner_steps(5, comm_seconds=0.0, **kwargs) == 5


def test_invalid_inputs_name_what_is_wrong():
    with pytest.raises(ConfigError, match="comm_seconds"):
        next_inner_steps(
            10, comm_seconds=float("nan"), compute_seconds_per_step=0.1, min_steps=1, max_steps=9
        )
    with pytest.raises(ConfigError, match="min_steps <= max_steps"):
        next_inner_steps(
            10, comm_seconds=1.0, compute_seconds_per_step=0.1, min_steps=10, max_steps=9
        )
