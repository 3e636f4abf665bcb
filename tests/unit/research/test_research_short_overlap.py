"""The short-overlap research simulation (research/short_overlap.py): with no delay it is the
simulator's blocking DiLoCoX to the last bit, so what a delay of τ inner steps costs is measured
against the same runs; it refuses what it cannot simulate."""

from __future__ import annotations

import pytest
from unit.research.research_fixtures import TINY, corpus

from research.outer import make_batches, make_eval_batches
from research.short_overlap import short_overlap_loss
from trainer.config import InnerConfig
from trainer.errors import ConfigError
from trainer.outer import OuterConfig
from veritrain.bench.simulate import SimulationConfig, simulate

BLOCKING = OuterConfig(
    kind="dilocox", overlap=False, rank=2, min_rank=1, max_rank=4, min_compress_dim=16
)


def _config(outer: OuterConfig = BLOCKING) -> SimulationConfig:
    return SimulationConfig(
        model=TINY,
        method="dilocox",
        outer=outer,
        inner_steps=4,
        total_steps=12,
        inner=InnerConfig(warmup_steps=2),
        eval_points=1,
    )


def _loss(tau: int, outer: OuterConfig = BLOCKING) -> float:
    tokens = corpus()
    return short_overlap_loss(
        _config(outer),
        tau=tau,
        batches=make_batches(tokens, context=16, batch=2, n_clusters=2, seed=0),
        eval_batches=make_eval_batches(tokens, context=16, sequences=4),
    )


def test_no_delay_is_the_simulators_blocking_dilocox_bit_for_bit() -> None:
    tokens = corpus()
    blocking = simulate(
        _config(),
        batches=make_batches(tokens, context=16, batch=2, n_clusters=2, seed=0),
        eval_batches=make_eval_batches(tokens, context=16, sequences=4),
    )
    assert _loss(0) == blocking.final_eval_loss


def test_a_delay_changes_where_the_clusters_train_and_still_learns() -> None:
    delayed = _loss(2)
    assert delayed != _loss(0)
    assert delayed < 5.45  # below the uniform prediction's ln 256 ≈ 5.545


def test_it_refuses_the_one_step_delay_and_a_delay_as_long_as_a_round() -> None:
    with pytest.raises(ConfigError, match="blocking"):
        _loss(1, OuterConfig(kind="dilocox", rank=2, min_rank=1, max_rank=4, min_compress_dim=16))
    with pytest.raises(ConfigError, match="shortest later round"):
        _loss(4)
