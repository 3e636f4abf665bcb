"""Streaming DiLoCo's levers in research (research/streaming.py): with one fragment, no delay and
a constant outer lr it is the simulator's blocking DiLoCoX to the last bit, so what each lever
changes is measured against the same runs; fragments keep the run's bytes and rounds; it refuses
what it cannot simulate."""

from __future__ import annotations

from dataclasses import replace

import pytest
from unit.research.research_fixtures import TINY, corpus

from research.outer import make_batches, make_eval_batches
from research.streaming import (
    Streaming,
    StreamingResult,
    fragment_ends,
    fragment_of,
    outer_lr_at,
    streaming_loss,
)
from trainer.config import InnerConfig
from trainer.errors import ConfigError
from trainer.model import ModelConfig
from trainer.outer import OuterConfig
from veritrain.bench.simulate import SimulationConfig, simulate

BLOCKING = OuterConfig(
    kind="dilocox", overlap=False, rank=2, min_rank=1, max_rank=4, min_compress_dim=16
)
TWO_LAYERS = replace(TINY, num_hidden_layers=2)


def _config(outer: OuterConfig = BLOCKING, model: ModelConfig = TINY) -> SimulationConfig:
    return SimulationConfig(
        model=model,
        method="dilocox",
        outer=outer,
        inner_steps=4,
        total_steps=12,
        inner=InnerConfig(warmup_steps=2),
        eval_points=1,
    )


def _run(
    streaming: Streaming, outer: OuterConfig = BLOCKING, model: ModelConfig = TINY
) -> StreamingResult:
    tokens = corpus()
    return streaming_loss(
        _config(outer, model),
        streaming,
        batches=make_batches(tokens, context=16, batch=2, n_clusters=2, seed=0),
        eval_batches=make_eval_batches(tokens, context=16, sequences=4),
    )


def test_the_defaults_are_the_simulators_blocking_dilocox_bit_for_bit() -> None:
    tokens = corpus()
    blocking = simulate(
        _config(),
        batches=make_batches(tokens, context=16, batch=2, n_clusters=2, seed=0),
        eval_batches=make_eval_batches(tokens, context=16, sequences=4),
    )
    result = _run(Streaming())
    assert result.final_loss == blocking.final_eval_loss
    assert result.exchanges == 3
    assert result.payload_bytes == sum(blocking.payload_bytes)


def test_the_trainers_short_overlap_is_this_simulation_bit_for_bit() -> None:
    """``OuterConfig.apply_delay``: the product's outer loop keeps the progress made since it
    contributed, as this research simulation does outside a blocking loop."""
    product = replace(BLOCKING, overlap=True, apply_delay=2, outer_lr=0.7, outer_momentum=0.9)
    assert product.overlapped and not product.look_ahead
    delayed = _run(Streaming(tau=2), product).final_loss
    assert delayed == _run(Streaming(tau=2)).final_loss
    # `veritrain bench convergence`'s simulator takes the same steps.
    tokens = corpus()
    simulated = simulate(
        _config(product),
        batches=make_batches(tokens, context=16, batch=2, n_clusters=2, seed=0),
        eval_batches=make_eval_batches(tokens, context=16, sequences=4),
    )
    assert simulated.final_eval_loss == delayed
    with pytest.raises(ConfigError, match="apply_delay"):
        _run(Streaming(tau=1), product)


def test_a_delay_changes_where_the_clusters_train_and_still_learns() -> None:
    delayed = _run(Streaming(tau=2)).final_loss
    assert delayed != _run(Streaming()).final_loss
    assert delayed < 5.45  # below the uniform prediction's ln 256 ≈ 5.545


def test_fragments_are_strided_blocks_on_staggered_rounds_that_all_end_with_the_run() -> None:
    assert [fragment_of(f"model.layers.{i}.mlp.up_proj.weight", 2) for i in range(4)] == [
        0,
        1,
        0,
        1,
    ]
    assert fragment_of("model.embed_tokens.weight", 2) == 0
    assert fragment_of("model.norm.weight", 2) == 1
    assert fragment_of("model.norm.weight", 1) == 0
    assert fragment_ends((100, 15, 14, 14), 0, 2) == [100, 115, 129, 143]
    assert fragment_ends((100, 15, 14, 14), 1, 2) == [93, 108, 122, 143]


def test_two_fragments_send_the_same_rounds_and_bytes_as_one_and_train_differently() -> None:
    whole = _run(Streaming(), model=TWO_LAYERS)
    streamed = _run(Streaming(fragments=2), model=TWO_LAYERS)
    assert streamed.exchanges == 2 * whole.exchanges  # T rounds of each fragment
    # The payload is split, not grown: at most a block's padding more per tensor group.
    assert abs(streamed.payload_bytes - whole.payload_bytes) <= 0.05 * whole.payload_bytes
    assert streamed.final_loss != whole.final_loss
    assert streamed.final_loss < 5.45


def test_an_outer_lr_schedule_changes_the_run_and_its_end_value_is_reached() -> None:
    assert outer_lr_at(0.7, 0.35, 0, 8) == 0.7
    assert outer_lr_at(0.7, 0.35, 7, 8) == pytest.approx(0.35)
    assert outer_lr_at(0.7, None, 5, 8) == 0.7
    assert _run(Streaming(outer_lr_end=0.2)).final_loss != _run(Streaming()).final_loss


def test_a_flush_sends_one_more_payload_and_moves_theta() -> None:
    plain = _run(Streaming())
    flushed = _run(Streaming(flush=True))
    assert flushed.exchanges == plain.exchanges + 1
    # One payload more (its size depends on the side the round's basis is on).
    assert plain.payload_bytes < flushed.payload_bytes < plain.payload_bytes * 2
    assert flushed.final_loss != plain.final_loss
    assert flushed.final_loss < 5.45


def test_it_refuses_the_one_step_delay_and_a_delay_as_long_as_a_round() -> None:
    with pytest.raises(ConfigError, match="blocking"):
        _run(
            Streaming(tau=1),
            OuterConfig(kind="dilocox", rank=2, min_rank=1, max_rank=4, min_compress_dim=16),
        )
    with pytest.raises(ConfigError, match="shortest later round"):
        _run(Streaming(tau=4))
    with pytest.raises(ConfigError, match="fragment"):
        _run(Streaming(fragments=0))
