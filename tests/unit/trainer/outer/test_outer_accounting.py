"""Bytes on the inter-cluster links (trainer/outer/accounting.py), which the benchmarks and the
planner report."""

from __future__ import annotations

import pytest

from trainer.errors import ConfigError
from trainer.outer.accounting import allgather_bytes_per_outer_step, allreduce_bytes_per_outer_step


def test_ring_allreduce_and_allgather_bytes_follow_the_documented_formulas():
    assert (
        allreduce_bytes_per_outer_step(parameters=1000, n_clusters=2, inner_steps=25)
        == 1.0 * 4 * 1000 * 25
    )
    assert (
        allreduce_bytes_per_outer_step(parameters=1000, n_clusters=4, inner_steps=1)
        == 1.5 * 4 * 1000
    )
    assert allgather_bytes_per_outer_step(payload_bytes=300, n_clusters=4) == 900
    with pytest.raises(ConfigError, match="n_clusters"):
        allgather_bytes_per_outer_step(payload_bytes=1, n_clusters=0)
