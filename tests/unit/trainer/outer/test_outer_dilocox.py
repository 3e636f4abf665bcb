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
from safetensors.torch import load, save

from trainer.outer import Gathered, OuterConfig, RoundSignals
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
        gathered = [
            a.contribution(t, local).payload for a, local in zip(algos, locals_, strict=True)
        ]
        if in_flight is not None:
            updates.append(
                [
                    a.apply(t - 1, Gathered(in_flight), local, SIGNALS)
                    for a, local in zip(algos, locals_, strict=True)
                ]
            )
        in_flight = gathered
    updates.append(
        [
            a.apply(rounds - 1, Gathered(in_flight), local, SIGNALS)
            for a, local in zip(algos, locals_, strict=True)
        ]
    )
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
        updates = [
            a.apply(t, Gathered(gathered), local, SIGNALS)
            for a, local in zip(algos, locals_, strict=True)
        ]
        assert len({(u.payload_bytes, u.rank) for u in updates}) == 1
        lengths.append(updates[0].payload_bytes)
    dense = 4 * sum(p.numel() for _, p in named_params)
    assert max(lengths) < dense / 4, "a compressed payload must be much smaller than fp32"


def transmitted_vs_input(named_params, mode: str, rounds: int) -> list[float]:
    """‖Σ sent − Σ input‖ / ‖Σ input‖ after each round, one cluster, plain SGD outer step."""
    config = compressed(
        rank=4,
        min_rank=4,
        max_rank=4,
        adaptive_rank=False,
        bits=4,
        error_feedback=mode,
        **PLAIN_SGD,
    )
    algo = build_clusters(config, named_params, n_clusters=1)[0]
    local = start_locals(named_params, 1)[0]
    theta0 = [p.clone() for _, p in named_params]
    input_sum = [torch.zeros_like(p) for _, p in named_params]
    persistent = [
        torch.randn(p.shape, generator=torch.Generator().manual_seed(5)) * 1e-3
        for _, p in named_params
    ]
    relative = []
    for t in range(rounds):
        # A full-rank drift that persists: rank 2 can never carry it in one round.
        drift = [
            f + 0.3 * d for f, d in zip(persistent, local_drift(named_params, 0, t), strict=True)
        ]
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


@pytest.mark.parametrize("two_sided", [True, False], ids=["two-sided", "one-sided"])
@pytest.mark.parametrize("bits", [2, 4, 32])
def test_local_error_feedback_carries_the_residual_exactly(named_params, bits, two_sided):
    """What a round could not send is neither lost nor sent twice: after every round the
    cluster resumes exactly where its inner steps left it (θ minus the residual), and what θ
    received plus the residual is everything the cluster trained, to fp32 rounding."""
    config = compressed(
        rank=4, bits=bits, two_sided=two_sided, dense_bits=8, anomaly_checks=False, **PLAIN_SGD
    )
    algo = build_clusters(config, named_params, n_clusters=1)[0]
    local = start_locals(named_params, 1)[0]
    theta0 = [p.clone() for _, p in named_params]
    for t in range(6):
        train_locals([local], named_params, t)
        trained = [p.clone() for p in local]  # where the inner steps left the cluster
        blocking_round([algo], [local], t)
        residual = algo.codec.residual()
        theta = algo.global_parameters()
        dropped = sum(float(e.norm() ** 2) for e in residual) ** 0.5
        assert dropped > 0.1 * sum(
            float((a - b).norm() ** 2) for a, b in zip(theta0, trained, strict=True)
        ) ** 0.5 / (t + 1), "compression dropped nothing"
        for name_p, p, start, th, e, origin in zip(
            named_params, local, trained, theta, residual, theta0, strict=True
        ):
            scale = float((origin - start).abs().max())
            # 1. The next round starts at θ − e: the cluster's own progress, kept whole.
            torch.testing.assert_close(p, start, rtol=0, atol=1e-6 * max(scale, 1e-3))
            # 2. θ's total movement plus the residual is the total trained drift.
            torch.testing.assert_close(
                (origin - th) + e,
                origin - start,
                rtol=0,
                atol=1e-6 * max(scale, 1e-3),
                msg=lambda m, name=name_p[0], t=t: f"{name} after round {t}: {m}",
            )


def test_without_error_feedback_the_sums_stay_apart(named_params):
    without = transmitted_vs_input(named_params, "none", rounds=60)
    # What a round cannot carry is lost for good: the gap stays a fixed fraction of the sum.
    assert min(without[30:]) > 0.8


@pytest.mark.parametrize("two_sided", [True, False], ids=["two-sided", "one-sided"])
@pytest.mark.parametrize("bits", [8, 4])
def test_gathered_rank_ordered_mean_equals_the_dense_mean_within_the_quantisation_bound(
    named_params, bits, two_sided
):
    config = compressed(
        rank=8, max_rank=8, bits=bits, quant_block=32, two_sided=two_sided, **PLAIN_SGD
    )
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
        a.apply(0, Gathered(gathered), local, SIGNALS)
    for t0, t1, step in zip(theta0, algos[0].global_parameters(), expected_step, strict=True):
        torch.testing.assert_close(t0 - t1, step, rtol=0, atol=1e-7)


@pytest.mark.parametrize("two_sided", [True, False], ids=["two-sided", "one-sided"])
def test_int2_factors_and_int8_whole_tensors_decode_within_their_quantisers_error(
    named_params, two_sided
):
    config = compressed(rank=8, max_rank=8, bits=2, dense_bits=8, two_sided=two_sided, **PLAIN_SGD)
    algos = build_clusters(config, named_params, n_clusters=2)
    locals_ = start_locals(named_params, 2)
    train_locals(locals_, named_params, 0)
    theta0 = [p for _, p in named_params]
    codec = algos[0].codec
    for algo, local in zip(algos, locals_, strict=True):
        pseudo_gradient = [t0 - p for t0, p in zip(theta0, local, strict=True)]
        exact = codec.project(0, pseudo_gradient)
        decoded = codec.coordinates(0, algo.contribution(0, local).payload)
        factor_error = factor_norm = 0.0
        for i, (e, d) in enumerate(zip(exact, decoded, strict=True)):
            if codec.compressed[i]:
                factor_error += float((e.reshape(-1) - d.reshape(-1)).pow(2).sum())
                factor_norm += float(e.pow(2).sum())
            else:  # int8 absmax blocks of 64: half a step of the tensor's largest element at most
                bound = float(e.abs().max()) / 127 / 2 * (1 + 2**-7)
                assert float((e - d).abs().max()) <= bound, named_params[i][0]
        # int2 on the factors: a four-level grid per block, ~0.12 of the energy lost (Max 1960)
        # where an absmax ternary grid would lose ~0.45.
        assert 0.05 < factor_error / factor_norm < 0.2


def test_fp32_factors_after_an_int8_norm_decode_exactly():
    """A norm of 64 elements is one int8 block, 66 bytes, so the factors after it start 2 bytes
    past a multiple of 4; at ``bits=32`` they once failed to decode there."""
    g = torch.Generator().manual_seed(7)
    params = [("ln.weight", torch.ones(64)), ("fc.weight", torch.randn(64, 64, generator=g) * 0.02)]
    config = compressed(rank=8, max_rank=8, bits=32, dense_bits=8, **PLAIN_SGD)
    algo = build_clusters(config, params, n_clusters=1)[0]
    local = start_locals(params, 1)[0]
    train_locals([local], params, 0)
    pseudo_gradient = [p - q for (_, p), q in zip(params, local, strict=True)]
    codec = algo.codec
    exact = codec.project(0, pseudo_gradient)
    decoded = codec.coordinates(0, algo.contribution(0, local).payload)
    assert codec.compressed == [False, True]
    assert torch.equal(decoded[1], exact[1])
    bound = float(exact[0].abs().max()) / 127 / 2 * (1 + 2**-7)  # int8 absmax, half a step
    assert float((exact[0] - decoded[0]).abs().max()) <= bound


def test_int2_factors_in_blocks_of_six_round_trip_through_two_clusters():
    """``quant_block`` 6 is accepted (an even block), and the 64 x 64 matrix's rank-8 factor is
    86 blocks of 6 -- 516 int2 codes, whole bytes -- but the 6 x 3 head's rank-1 factor is one
    block: 6 codes, a byte and a half. The encoder once refused its own codes there ("expected
    a multiple of 4 int2 codes"). Both clusters' payloads are as long as the codec plans, and
    decode."""
    g = torch.Generator().manual_seed(11)
    params = [
        ("ln.weight", torch.ones(10)),
        ("fc.weight", torch.randn(64, 64, generator=g) * 0.02),
        ("head.weight", torch.randn(6, 3, generator=g) * 0.02),
    ]
    config = compressed(rank=8, max_rank=8, bits=2, quant_block=6, min_compress_dim=3, **PLAIN_SGD)
    algos = build_clusters(config, params, n_clusters=2)
    locals_ = start_locals(params, 2)
    train_locals(locals_, params, 0)
    payloads = [a.contribution(0, loc).payload for a, loc in zip(algos, locals_, strict=True)]
    codec = algos[0].codec
    assert codec.compressed == [False, True, True]
    for payload in payloads:
        assert payload.numel() == codec.payload_length(0)
        assert all(bool(torch.isfinite(c).all()) for c in codec.coordinates(0, payload))


@pytest.mark.parametrize("proxy", ["none", "own", "eager", "anchored"])
def test_overlap_applies_every_rounds_mean_exactly_once(named_params, proxy):
    """The look-ahead only moves where a round starts, never θ: with plain SGD (lr 1) and
    drifts that do not depend on the start, θ_T = θ₀ − Σ_t mean_i Δ_t^i for every proxy."""
    config = OuterConfig(kind="dilocox", compression=False, delay_proxy=proxy, **PLAIN_SGD)
    algos = build_clusters(config, named_params, n_clusters=2)
    locals_ = start_locals(named_params, 2)
    updates = overlapped_run(algos, locals_, named_params, rounds=5)

    assert [u[0].round for u in updates] == [0, 1, 2, 3, 4]
    expected = [p.clone() for _, p in named_params]
    for t in range(5):
        for e, d0, d1 in zip(
            expected, local_drift(named_params, 0, t), local_drift(named_params, 1, t), strict=True
        ):
            e.sub_((d0 + d1) / 2)
    for e, g in zip(expected, algos[0].global_parameters(), strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-6)
    # After the final exchange every cluster holds θ_T.
    for local in locals_:
        for p, g in zip(local, algos[0].global_parameters(), strict=True):
            assert torch.equal(p, g)


def test_overlap_with_one_cluster_and_own_look_ahead_starts_each_round_at_the_next_theta(
    named_params,
):
    """With one cluster the look-ahead is the outer step itself: from round 2 on, every round
    starts exactly where blocking DiLoCo would put θ."""
    config = OuterConfig(kind="dilocox", compression=False, delay_proxy="own")
    algo = build_clusters(config, named_params, n_clusters=1)[0]
    local = start_locals(named_params, 1)[0]
    in_flight = None
    for t in range(4):
        train_locals([local], named_params, t)
        payload = algo.contribution(t, local).payload
        if in_flight is not None:
            algo.apply(t - 1, Gathered([in_flight]), local, SIGNALS)
            if t >= 1:
                # local = look-ahead with the fresh Δ_t; θ after applying Δ_t must equal it.
                probe = build_clusters(config, named_params, n_clusters=1)[0]
                probe.load_state_dict(algo.state_dict())
                probe.apply(t, Gathered([payload]), [p.clone() for p in local], SIGNALS)
                for p, g in zip(local, probe.global_parameters(), strict=True):
                    torch.testing.assert_close(p, g, rtol=0, atol=1e-6)
        in_flight = payload


def resume_matches(config, named_params, n_clusters, rounds, split, overlapped):
    """Run `rounds` rounds straight, and again with a state_dict save/load after `split` -- through
    safetensors bytes, as a checkpoint stores it (every tensor comes back row-major)."""

    def drive(algos, locals_, start, stop, in_flight):
        for t in range(start, stop):
            train_locals(locals_, named_params, t)
            gathered = [
                a.contribution(t, local).payload for a, local in zip(algos, locals_, strict=True)
            ]
            if not overlapped:
                for a, local in zip(algos, locals_, strict=True):
                    a.apply(t, Gathered(gathered), local, SIGNALS)
                continue
            if in_flight is not None:
                for a, local in zip(algos, locals_, strict=True):
                    a.apply(t - 1, Gathered(in_flight), local, SIGNALS)
            in_flight = gathered
        return in_flight

    algos = build_clusters(config, named_params, n_clusters)
    locals_ = start_locals(named_params, n_clusters)
    in_flight = drive(algos, locals_, 0, split, None)
    saved = [load(save(a.state_dict())) for a in algos]
    saved_locals = [[p.clone() for p in local] for local in locals_]
    drive(algos, locals_, split, rounds, in_flight)

    resumed = build_clusters(config, named_params, n_clusters)
    for algo, state in zip(resumed, saved, strict=True):
        algo.load_state_dict(state)
    # The runtime restarts the in-flight exchange from the pending contributions.
    pending = [a.pending_contribution() for a in resumed]
    restarted = [c.payload for c in pending] if overlapped else None
    assert (restarted is None) == (not overlapped) and all(
        c is not None for c in pending
    ) == overlapped
    drive(resumed, saved_locals, split, rounds, restarted)

    for a, b in zip(locals_, saved_locals, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    for a, b in zip(algos, resumed, strict=True):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys()
        assert all(torch.equal(sa[k], sb[k]) for k in sa), [
            k for k in sa if not torch.equal(sa[k], sb[k])
        ]


@pytest.mark.parametrize("two_sided", [True, False], ids=["two-sided", "one-sided"])
@pytest.mark.parametrize("overlapped", [False, True], ids=["blocking", "overlapped"])
def test_state_dict_round_trip_continues_bit_exactly(named_params, overlapped, two_sided):
    config = compressed(
        overlap=overlapped, delay_proxy="anchored", rank=8, bits=4, two_sided=two_sided
    )
    resume_matches(config, named_params, n_clusters=2, rounds=6, split=3, overlapped=overlapped)


def test_rank_shrinks_with_concentrated_energy_and_grows_only_when_the_loss_stalls(named_params):
    config = compressed(
        rank=8, min_rank=2, max_rank=16, rank_energy=0.6, stall_rounds=2, adaptive_rank=True
    )
    algos = build_clusters(config, named_params, n_clusters=2)
    locals_ = start_locals(named_params, 2)
    ranks = []
    for t in range(10):
        loss = (
            3.0 - 0.1 * t if t < 5 else 2.6 if t < 8 else 2.6 - 0.1 * (t - 7)
        )  # improve, stall, improve
        signals = RoundSignals(mean_train_loss=loss)
        train_locals(locals_, named_params, t)
        gathered = [
            a.contribution(t, local).payload for a, local in zip(algos, locals_, strict=True)
        ]
        updates = [
            a.apply(t, Gathered(gathered), local, signals)
            for a, local in zip(algos, locals_, strict=True)
        ]
        ranks.append(updates[0].rank)
    improving_ranks = ranks[:6]
    assert improving_ranks == sorted(improving_ranks, reverse=True), (
        f"rank grew while improving: {ranks}"
    )
    assert ranks[1] < ranks[0], (
        "the drift is rank-2 dominated: 60% of its energy needs few directions"
    )
    assert ranks[7] > ranks[5], f"two stalled rounds must give rank back: {ranks}"
    assert min(ranks[7:]) == ranks[7], f"rank given back on a stall must stay: {ranks}"
    assert max(ranks) <= 16


@pytest.mark.parametrize("two_sided", [True, False], ids=["two-sided", "one-sided"])
def test_coordinates_preserve_inner_products_of_the_projections(named_params, two_sided):
    """The anomaly checks measure norms and cosines on coordinates; that is only sound if the
    coordinates are an orthonormal system for the projected matrices."""
    algo = build_clusters(compressed(rank=6, two_sided=two_sided), named_params, n_clusters=1)[0]
    codec = algo.codec
    a = local_drift(named_params, 0, 0)
    b = local_drift(named_params, 1, 3)
    ca, cb = codec.project(0, a), codec.project(0, b)
    ea, eb = codec.expand(0, ca), codec.expand(0, cb)
    for i in range(len(named_params)):
        in_coordinates = float(torch.dot(ca[i].reshape(-1).double(), cb[i].reshape(-1).double()))
        in_parameters = float(torch.dot(ea[i].reshape(-1).double(), eb[i].reshape(-1).double()))
        assert in_coordinates == pytest.approx(in_parameters, rel=1e-4, abs=1e-12)
        # And expanding is a projection: projecting again changes nothing.
        again = codec.expand(0, codec.project(0, ea))[i]
        torch.testing.assert_close(again, ea[i], rtol=1e-4, atol=1e-9)


def warm_up_run(algos, locals_, named_params, rounds, sync_rounds):
    """The runtime's call order with a warm-up: rounds below ``sync_rounds`` are applied before
    the next round computes, the rest one round late, the last at the end."""
    in_flight = None
    for t in range(rounds):
        train_locals(locals_, named_params, t)
        gathered = [
            a.contribution(t, local).payload for a, local in zip(algos, locals_, strict=True)
        ]
        due = [(t - 1, in_flight)] if in_flight is not None else []
        in_flight = None
        if t < sync_rounds or t == rounds - 1:
            due.append((t, gathered))
        else:
            in_flight = gathered
        for round, payloads in due:
            for a, local in zip(algos, locals_, strict=True):
                a.apply(round, Gathered(payloads), local, SIGNALS)


def test_warm_up_rounds_start_every_cluster_from_the_same_theta(named_params):
    """``sync_rounds=1``: round 0 is applied before round 1 computes, so both clusters start
    round 1 at θ₁ (without it each continues from where its round 0 ended)."""
    config = OuterConfig(kind="dilocox", compression=False, sync_rounds=1, **PLAIN_SGD)
    algos = build_clusters(config, named_params, n_clusters=2)
    locals_ = start_locals(named_params, 2)
    train_locals(locals_, named_params, 0)
    gathered = [a.contribution(0, local).payload for a, local in zip(algos, locals_, strict=True)]
    for a, local in zip(algos, locals_, strict=True):
        a.apply(0, Gathered(gathered), local, SIGNALS)
    theta = algos[0].global_parameters()
    for local in locals_:
        assert all(torch.equal(p, g) for p, g in zip(local, theta, strict=True))
    # Round 1 is overlapped again: contributed now, applied after round 2 computes.
    train_locals(locals_, named_params, 1)
    for a, local in zip(algos, locals_, strict=True):
        a.contribution(1, local)
    train_locals(locals_, named_params, 2)
    for a, local in zip(algos, locals_, strict=True):
        a.contribution(2, local)  # apply(1) is not due yet: no CallOrderError
    assert all(torch.equal(g, t) for g, t in zip(algos[0].global_parameters(), theta, strict=True))


def _warm_up_against_blocking(named_params, **settings):
    runs = []
    for overlap in (True, False):
        config = compressed(overlap=overlap, sync_rounds=4, **PLAIN_SGD, **settings)
        algos = build_clusters(config, named_params, n_clusters=2)
        locals_ = start_locals(named_params, 2)
        if overlap:
            warm_up_run(algos, locals_, named_params, 4, config.sync_rounds)
        else:
            for t in range(4):
                train_locals(locals_, named_params, t)
                blocking_round(algos, locals_, t)
        runs.append((algos, locals_))
    return runs


def test_an_overlapped_run_synchronous_throughout_is_a_blocking_run(named_params):
    """``sync_rounds`` >= T turns the overlap off round by round: uncompressed, θ and every
    cluster's local parameters end bit for bit where a blocking run's do."""
    (warm, warm_locals), (block, block_locals) = _warm_up_against_blocking(
        named_params, compression=False
    )
    for g, h in zip(warm[0].global_parameters(), block[0].global_parameters(), strict=True):
        assert torch.equal(g, h)
    for a, b in zip(warm_locals, block_locals, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("bits", [2, 4])
def test_warm_up_rounds_keep_the_residual_in_the_local_parameters(named_params, bits):
    """Compressed, after every synchronous round each cluster resumes at θ minus what it could
    not send yet (local error feedback), as in a blocking run -- never at θ itself."""
    (warm, warm_locals), _ = _warm_up_against_blocking(named_params, bits=bits)
    theta = warm[0].global_parameters()
    for a, local in zip(warm, warm_locals, strict=True):
        residual = a.codec.residual()
        assert max(float(e.abs().max()) for e in residual) > 0
        for p, g, e in zip(local, theta, residual, strict=True):
            torch.testing.assert_close(p, g - e, rtol=0, atol=1e-6)


def test_sync_rounds_is_recorded_only_when_set():
    """An old genesis names no ``sync_rounds`` and reads back as itself; a warm-up is recorded."""
    assert "sync_rounds" not in OuterConfig(kind="dilocox").to_dict()
    recorded = OuterConfig(kind="dilocox", sync_rounds=1).to_dict()
    assert recorded["sync_rounds"] == 1
    assert OuterConfig(**recorded) == OuterConfig(kind="dilocox", sync_rounds=1)
    assert OuterConfig(**recorded) != OuterConfig(kind="dilocox")
