"""DiLoCoX: compressed payloads, error feedback, the one-step delay, adaptive rank, resume."""

from __future__ import annotations

import pytest
import torch
from outer_helpers import (
    SIGNALS,
    blocking_round,
    build_clusters,
    local_drift,
    start_locals,
    train_locals,
)

from trainer.outer import OuterConfig, RoundSignals
from trainer.outer.quantize import levels

PLAIN_SGD = {"outer_lr": 1.0, "outer_momentum": 0.0, "nesterov": False}
"""θ ← θ − mean: the outer step is the identity on the averaged pseudo-gradient, so sums of
what was sent can be read off the global parameters."""


def compressed(**overrides) -> OuterConfig:
    settings = {"kind": "dilocox", "rank": 4, "min_rank": 2, "max_rank": 8, "overlap": False}
    return OuterConfig(**{**settings, **overrides})


def overlapped_run(algos, locals_, named_params, rounds):
    """The protocol's overlapped call order: c_t, apply(t−1), ..., then the final apply."""
    updates, in_flight = [], None
    for t in range(rounds):
        train_locals(locals_, named_params, t)
        gathered = [a.contribution(t, local).payload for a, local in zip(algos, locals_, strict=True)]
        if in_flight is not None:
            updates.append([a.apply(t - 1, in_flight, local, SIGNALS) for a, local in zip(algos, locals_, strict=True)])
        in_flight = gathered
    updates.append([a.apply(rounds - 1, in_flight, local, SIGNALS) for a, local in zip(algos, locals_, strict=True)])
    return updates


def test_payload_length_is_identical_across_clusters_every_round(named_params):
    algos = build_clusters(compressed(rank=8), named_params, n_clusters=3)
    locals_ = start_locals(named_params, 3)
    lengths = []
    for t in range(6):
        train_locals(locals_, named_params, t)
        contributions = [a.contribution(t, local) for a, local in zip(algos, locals_, strict=True)]
        assert len({c.payload.numel() for c in contributions}) == 1, f"round {t}"
        gathered = [c.payload for c in contributions]
        updates = [a.apply(t, gathered, local, SIGNALS) for a, local in zip(algos, locals_, strict=True)]
        assert len({(u.payload_bytes, u.rank) for u in updates}) == 1
        lengths.append(updates[0].payload_bytes)
    dense = 4 * sum(p.numel() for _, p in named_params)
    assert max(lengths) < dense / 4, "a compressed payload must be much smaller than fp32"


def transmitted_vs_input(named_params, mode: str, rounds: int) -> list[float]:
    """‖Σ sent − Σ input‖ / ‖Σ input‖ after each round, one cluster, plain SGD outer step."""
    config = compressed(rank=4, min_rank=4, max_rank=4, adaptive_rank=False, bits=4,
                        error_feedback=mode, **PLAIN_SGD)
    algo = build_clusters(config, named_params, n_clusters=1)[0]
    local = start_locals(named_params, 1)[0]
    theta0 = [p.clone() for _, p in named_params]
    input_sum = [torch.zeros_like(p) for _, p in named_params]
    persistent = [torch.randn(p.shape, generator=torch.Generator().manual_seed(5)) * 1e-3 for _, p in named_params]
    relative = []
    for t in range(rounds):
        # A full-rank drift that persists: rank 2 can never carry it in one round.
        drift = [f + 0.3 * d for f, d in zip(persistent, local_drift(named_params, 0, t), strict=True)]
        for acc, p, d in zip(input_sum, local, drift, strict=True):
            acc.add_(d)
            p.sub_(d)
        blocking_round([algo], [local], t)
        sent = [a - b for a, b in zip(theta0, algo.global_parameters(), strict=True)]
        gap = sum(float((s - i).norm() ** 2) for s, i in zip(sent, input_sum, strict=True)) ** 0.5
        relative.append(gap / sum(float(i.norm() ** 2) for i in input_sum) ** 0.5)
    return relative


@pytest.mark.parametrize("mode", ["buffer", "local"])
def test_error_feedback_makes_the_transmitted_sum_converge_to_the_input_sum(named_params, mode):
    relative = transmitted_vs_input(named_params, mode, rounds=120)
    # Rank 4 int4 drops most of every round of a full-rank drift; the running sums still meet
    # (their gap is the bounded residual, so relative to a growing sum it shrinks like 1/t).
    assert relative[0] > 0.9
    assert relative[-1] < 0.15
    assert relative[-1] < relative[60] < relative[30] < relative[0]


def test_without_error_feedback_the_sums_stay_apart(named_params):
    without = transmitted_vs_input(named_params, "none", rounds=60)
    # What a round cannot carry is lost for good: the gap stays a fixed fraction of the sum.
    assert min(without[30:]) > 0.8


@pytest.mark.parametrize("bits", [8, 4])
def test_gathered_rank_ordered_mean_equals_the_dense_mean_within_the_quantisation_bound(named_params, bits):
    config = compressed(rank=8, max_rank=8, bits=bits, quant_block=32, **PLAIN_SGD)
    algos = build_clusters(config, named_params, n_clusters=3)
    locals_ = start_locals(named_params, 3)
    train_locals(locals_, named_params, 0)
    theta0 = [p for _, p in named_params]
    pseudo_gradients = [[t0 - p for t0, p in zip(theta0, local, strict=True)] for local in locals_]
    codec = algos[0].codec

    gathered = [a.contribution(0, local).payload for a, local in zip(algos, locals_, strict=True)]
    # What every cluster would have sent without quantisation: its exact factors / tensors.
    exact = [codec.project(0, pg) for pg in pseudo_gradients]
    decoded = [codec.coordinates(0, p) for p in gathered]
    for i in range(len(named_params)):
        exact_mean = sum(e[i] for e in exact) / 3
        decoded_mean = (decoded[0][i] + decoded[1][i] + decoded[2][i]) / 3
        if codec.compressed[i]:
            # Per element at most half a quantisation step of the largest factor element.
            steps = [e[i].abs().max() / levels(bits) / 2 * (1 + 2**-7) for e in exact]
            bound = sum(steps) / 3
        else:
            bound = max(float(e[i].abs().max()) for e in exact) * 2**-8  # bf16
        assert float((decoded_mean - exact_mean).abs().max()) <= bound, named_params[i][0]

    # The outer step applies exactly the rank-ordered mean, expanded (plain SGD, lr 1).
    mean = [(d[0].clone() + d[1]) + d[2] for d in zip(*decoded, strict=True)]
    expected_step = codec.expand(0, [m / 3 for m in mean])
    for a, local in zip(algos, locals_, strict=True):
        a.apply(0, gathered, local, SIGNALS)
    for t0, t1, step in zip(theta0, algos[0].global_parameters(), expected_step, strict=True):
        torch.testing.assert_close(t0 - t1, step, rtol=0, atol=1e-7)
