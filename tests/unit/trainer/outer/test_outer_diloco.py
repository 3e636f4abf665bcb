"""Plain DiLoCo: blocking, uncompressed fp32 payloads, Nesterov outer step."""

from __future__ import annotations

import hashlib

import pytest
import torch
from outer_helpers import SIGNALS, blocking_round, build_clusters, start_locals, train_locals

from trainer.outer import Gathered, OuterConfig
from trainer.outer.codec import DenseCodec
from trainer.outer.errors import CallOrderError, PayloadError


def test_first_outer_step_is_nesterov_on_the_mean_pseudo_gradient(named_params):
    config = OuterConfig(kind="diloco")
    algos = build_clusters(config, named_params, n_clusters=2)
    locals_ = start_locals(named_params, 2)
    train_locals(locals_, named_params, round=0)
    expected_mean = [
        ((p0 - l0) + (p0 - l1)) / 2
        for (_, p0), l0, l1 in zip(named_params, locals_[0], locals_[1], strict=True)
    ]

    updates = blocking_round(algos, locals_, round=0)

    # Momentum starts at zero: b = Δ̄, u = Δ̄ + 0.9·b = 1.9·Δ̄, θ₁ = θ₀ − 0.7·u.
    for (_, p0), mean, l0, l1 in zip(
        named_params, expected_mean, locals_[0], locals_[1], strict=True
    ):
        torch.testing.assert_close(l0, p0 - 0.7 * 1.9 * mean, rtol=0, atol=1e-7)
        assert torch.equal(l0, l1), "every cluster must start the next round from the same θ"
    assert all(u.rank == 0 and u.bits == 32 for u in updates)
    assert updates[0].payload_bytes == 4 * sum(p.numel() for _, p in named_params)


def test_digests_are_sha256_of_the_payload_bytes_and_agree_across_clusters(named_params):
    algos = build_clusters(OuterConfig(), named_params, n_clusters=3)
    locals_ = start_locals(named_params, 3)
    train_locals(locals_, named_params, round=0)
    contributions = [a.contribution(0, local) for a, local in zip(algos, locals_, strict=True)]
    gathered = [c.payload for c in contributions]

    assert len({c.payload.numel() for c in contributions}) == 1
    for c in contributions:
        assert c.digest == hashlib.sha256(bytes(c.payload.tolist())).hexdigest()
    updates = [
        a.apply(0, Gathered(gathered), local, SIGNALS)
        for a, local in zip(algos, locals_, strict=True)
    ]
    assert [list(u.contribution_digests) for u in updates] == [
        [c.digest for c in contributions]
    ] * 3


def test_state_dict_round_trip_continues_bit_exactly(named_params):
    config = OuterConfig()
    algos = build_clusters(config, named_params, n_clusters=2)
    locals_ = start_locals(named_params, 2)
    for round in range(2):
        train_locals(locals_, named_params, round)
        blocking_round(algos, locals_, round)
    saved = [a.state_dict() for a in algos]
    saved_locals = [[p.clone() for p in local] for local in locals_]

    for round in range(2, 4):
        train_locals(locals_, named_params, round)
        blocking_round(algos, locals_, round)

    resumed = build_clusters(config, named_params, n_clusters=2)
    for algo, state in zip(resumed, saved, strict=True):
        algo.load_state_dict(state)
    for round in range(2, 4):
        train_locals(saved_locals, named_params, round)
        blocking_round(resumed, saved_locals, round)

    for a, b in zip(locals_, saved_locals, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    for a, b in zip(algos, resumed, strict=True):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_calls_out_of_order_are_refused(named_params):
    algo = build_clusters(OuterConfig(), named_params, n_clusters=1)[0]
    local = start_locals(named_params, 1)[0]
    with pytest.raises(CallOrderError, match="expected apply for round"):
        algo.apply(0, Gathered([torch.zeros(4, dtype=torch.uint8)]), local, SIGNALS)
    c = algo.contribution(0, local)
    with pytest.raises(CallOrderError, match=r"expected apply\(0\) before"):
        algo.contribution(1, local)
    with pytest.raises(PayloadError, match="expected a payload of"):
        algo.apply(0, Gathered([c.payload[:-4]]), local, SIGNALS)
    with pytest.raises(PayloadError, match="expected 1 gathered payloads, got 2"):
        algo.apply(0, Gathered([c.payload, c.payload]), local, SIGNALS)


def test_local_parameters_of_the_wrong_shape_are_refused(named_params):
    algo = build_clusters(OuterConfig(), named_params, n_clusters=1)[0]
    local = start_locals(named_params, 1)[0]
    local[0] = local[0].t()
    with pytest.raises(PayloadError, match=r"expected blocks.0.mlp.fc.weight of shape \(96, 48\)"):
        algo.contribution(0, local)


@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_an_fp32_payload_decodes_wherever_its_bytes_start(offset):
    """A payload handed over as a slice of a larger buffer (a received message with a header,
    say) need not start on a 4-byte boundary; ``Tensor.view`` to fp32 refuses such an offset."""
    codec = DenseCodec([torch.Size([3, 2]), torch.Size([5])])
    gradient = [torch.randn(3, 2), torch.randn(5)]
    payload = codec.encode(0, gradient)
    buffer = torch.cat([torch.zeros(offset, dtype=torch.uint8), payload])
    coordinates = codec.coordinates(0, buffer[offset:])
    assert all(torch.equal(c, g) for c, g in zip(coordinates, gradient, strict=True))
    with pytest.raises(PayloadError, match="expected a payload of 44 bytes, got 43"):
        codec.coordinates(0, buffer[offset + 1 :])
