"""The single-process simulator behind the outer defaults (veritrain/bench/simulate.py) runs the
trainer's own inner loop."""

from __future__ import annotations

import pytest
from unit.research.research_fixtures import TINY, corpus

from research.outer import make_batches, make_eval_batches
from trainer.config import InnerConfig
from trainer.errors import ConfigError
from trainer.outer import OuterConfig
from trainer.outer.accounting import allreduce_bytes_per_outer_step
from veritrain.bench.simulate import SimulationConfig, simulate


def run(method: str, outer: OuterConfig | None = None, **overrides):
    tokens = corpus()
    settings = {"inner": InnerConfig(warmup_steps=2), **overrides}
    config = SimulationConfig(
        model=TINY,
        method=method,
        outer=outer or OuterConfig(kind="diloco"),
        inner_steps=4,
        total_steps=8,
        eval_points=2,
        **settings,
    )
    batches = make_batches(
        tokens, context=TINY.context, batch=2, n_clusters=config.n_clusters, seed=0
    )
    return simulate(
        config, batches=batches, eval_batches=make_eval_batches(tokens, context=16, sequences=4)
    )


def test_every_method_trains_and_counts_its_bytes():
    allreduce = run("allreduce")
    diloco = run("diloco")
    dilocox = run(
        "dilocox", OuterConfig(kind="dilocox", rank=2, min_rank=1, max_rank=4, min_compress_dim=16)
    )
    params = allreduce.parameters
    assert allreduce.bytes_per_cluster == 2 * allreduce_bytes_per_outer_step(
        parameters=params, n_clusters=2, inner_steps=4
    )
    assert diloco.bytes_per_cluster == 2 * 4 * params  # two rounds of one fp32 payload
    assert dilocox.bytes_per_cluster == sum(dilocox.payload_bytes) < diloco.bytes_per_cluster / 4
    for result in (allreduce, diloco, dilocox):
        assert not result.diverged
        # Below the uniform-prediction loss ln 256 ≈ 5.545, and improving between the two
        # evaluations.
        assert result.curve[-1][1] < min(result.curve[0][1], 5.45)
        assert result.allreduce_bytes_per_cluster == allreduce.bytes_per_cluster


def test_simulation_is_deterministic():
    config = OuterConfig(kind="dilocox", rank=2, min_rank=1, max_rank=4, min_compress_dim=16)
    assert run("dilocox", config).curve == run("dilocox", config).curve


def test_the_simulated_inner_loop_is_the_trainers_configuration():
    # A learning rate of zero leaves every weight where it started, so the held-out loss of
    # the first and the last evaluation are equal: the simulator reads the trainer's InnerConfig
    # (a private schedule or a hard-coded lr would train).
    frozen = run("diloco", inner=InnerConfig(lr=1e-12, warmup_steps=0, weight_decay=0.0))
    assert frozen.curve[0][1] == pytest.approx(frozen.curve[-1][1], abs=1e-6)
    moving = run("diloco")
    assert moving.curve[-1][1] < moving.curve[0][1] - 0.05


def test_method_and_outer_kind_must_agree():
    with pytest.raises(ConfigError, match="must match method"):
        SimulationConfig(model=TINY, method="dilocox", outer=OuterConfig(kind="diloco"))


def test_rounds_of_unequal_length_keep_the_tokens_and_move_the_synchronisation():
    # Two rounds of 4 given one by one are the default schedule, to the bit.
    assert run("diloco", round_steps=(4, 4)).curve == run("diloco").curve
    # Rounds of 6 and 2: the same 8 inner steps and two payloads, so the same bytes (AllReduce's
    # are per inner step, whatever the rounds); evaluated at the end of each round, and the first
    # average now comes after step 6, which changes what is learned.
    even, uneven = run("diloco"), run("diloco", round_steps=(6, 2))
    assert [step for step, _ in uneven.curve] == [6, 8]
    assert uneven.bytes_per_cluster == even.bytes_per_cluster
    assert uneven.allreduce_bytes_per_cluster == even.allreduce_bytes_per_cluster
    assert uneven.curve[-1][1] != even.curve[-1][1]
    allreduce = run("allreduce", round_steps=(6, 2))
    assert [step for step, _ in allreduce.curve] == [6, 8]
    assert allreduce.curve[-1][1] == run("allreduce").curve[-1][1]  # no exchange to move


@pytest.mark.parametrize("rounds", [(4, 3), (8, 0), (5, 4)])
def test_rounds_must_be_positive_and_add_up_to_the_run(rounds: tuple[int, ...]):
    with pytest.raises(ConfigError, match="round_steps must be inner step counts >= 1"):
        SimulationConfig(model=TINY, method="allreduce", total_steps=8, round_steps=rounds)
