"""The owner-reduce combination (trainer/outer/owner_reduce.py): owners that each see a share
of the payloads reach the verdicts and the mean that one process holding every payload (what
``veritrain verify`` is) computes, bit for bit; the bytes per cluster do not grow with C."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from outer_helpers import SIGNALS, build_clusters, start_locals, train_locals

from trainer.errors import ConfigError
from trainer.outer import OuterConfig, OuterLoop
from trainer.outer.accounting import (
    allgather_bytes_per_outer_step,
    owner_reduce_bytes_per_outer_step,
    statistics_chunks,
    statistics_floats,
)
from trainer.outer.algorithm import payload_digest
from trainer.outer.owner_reduce import (
    WholePayloads,
    apply_owned,
    assemble,
    combine_owners,
    owner_shares,
    share_bytes,
    split_segments,
    stage_mean_payload,
    stage_statistics,
)

OWNER_REDUCE = OuterConfig(
    kind="dilocox", rank=8, bits=2, dense_bits=8, exchange="owner-reduce", anomaly_scores=False
)


def test_owner_shares_cover_every_segment_once_and_balance_the_bytes() -> None:
    lengths = [1000, 40, 700, 700, 30, 500, 20]
    shares = owner_shares(lengths, 3)
    assert sorted(i for s in shares for i in s) == list(range(len(lengths)))
    assert [share_bytes(lengths, s) for s in shares] == [1000, 1200, 790]
    assert owner_shares(lengths, 3) == shares  # a rule, not a choice: every cluster agrees


def test_the_configuration_refuses_what_owners_cannot_do() -> None:
    with pytest.raises(ConfigError, match="anomaly_scores must be False or None"):
        OuterConfig(kind="dilocox", exchange="owner-reduce", anomaly_scores=True)
    # Scores left to the default are off where no cluster holds a whole contribution.
    assert not OuterConfig(kind="dilocox", exchange="owner-reduce").contribution_scores
    # Plain DiLoCo all-gathers whatever it is told (a preset's DiLoCoX setting, ignored).
    assert not OuterConfig(kind="diloco", exchange="owner-reduce").owner_reduce
    # An all-gather configuration is written as before, so an old genesis reads back as itself.
    assert "exchange" not in OuterConfig(kind="dilocox").to_dict()
    assert OuterConfig(**OWNER_REDUCE.to_dict()) == OWNER_REDUCE
    assert OuterConfig(**OWNER_REDUCE.to_dict()) != replace(OWNER_REDUCE, exchange="all-gather")


def _round_payloads(
    named_params: list[tuple[str, torch.Tensor]], clusters: int
) -> tuple[list[OuterLoop], list[torch.Tensor], list[list[torch.Tensor]]]:
    loops = build_clusters(OWNER_REDUCE, named_params, clusters)
    locals_ = start_locals(named_params, clusters)
    train_locals(locals_, named_params, 0)
    payloads = [
        loop.contribution(0, local).payload for loop, local in zip(loops, locals_, strict=True)
    ]
    assert all(isinstance(loop, OuterLoop) for loop in loops)
    return [loop for loop in loops if isinstance(loop, OuterLoop)], payloads, locals_


def test_owners_each_with_a_share_compute_what_one_process_with_every_payload_does(
    named_params: list[tuple[str, torch.Tensor]],
) -> None:
    loops, payloads, _ = _round_payloads(named_params, 3)
    loop = loops[0]
    digests = [payload_digest(p) for p in payloads]
    lengths = loop.segment_codec().segment_lengths(0)
    shares = owner_shares(lengths, 3)
    segments = [split_segments(p, lengths) for p in payloads]
    # Each owner (a different cluster) sees only its share of every payload.
    owned = [[{i: s[i] for i in share} for s in segments] for share in shares]
    by_owners = combine_owners(
        [loops[o].owner_statistics(0, owned[o], shares[o], digests) for o in range(len(shares))]
    )
    assert by_owners == stage_statistics(loop, 0, payloads, digests)
    pieces = [loops[o].owner_mean(0, owned[o], shares[o]) for o in range(len(shares))]
    mean_payload = assemble(pieces, lengths, shares)
    assert torch.equal(mean_payload, stage_mean_payload(loop, 0, payloads, [True] * 3))
    # The mean payload is laid out like a contribution and decodes near the exact mean.
    assert mean_payload.numel() == payloads[0].numel()
    codec = loop.segment_codec()
    exact = [
        sum(c[i] for c in (codec.coordinates(0, p) for p in payloads)) / 3
        for i in range(len(lengths))
    ]
    decoded = codec.coordinates(0, mean_payload)
    for e, d in zip(exact, decoded, strict=True):
        assert float((e - d).norm()) <= 0.6 * float(e.norm()) + 1e-12


def test_applying_through_owners_gives_every_cluster_the_same_global_parameters(
    named_params: list[tuple[str, torch.Tensor]],
) -> None:
    loops, payloads, locals_ = _round_payloads(named_params, 3)
    by_cluster = dict(enumerate(payloads))
    for loop, local in zip(loops, locals_, strict=True):
        apply_owned(loop, 0, WholePayloads(by_cluster, cluster=loop.cluster), local, SIGNALS)
    first = loops[0].global_parameters()
    for loop in loops[1:]:
        for a, b in zip(first, loop.global_parameters(), strict=True):
            assert torch.equal(a, b)
    assert any(not torch.equal(a, p) for a, (_, p) in zip(first, named_params, strict=True))


@pytest.mark.parametrize("clusters", [2, 4, 8])
def test_bytes_per_cluster_stay_near_two_payloads_whatever_the_cluster_count(
    clusters: int,
) -> None:
    # The tiny preset's stage payloads are a dozen segments of 0.3-3 KB.
    lengths = [2880, 2880, 1152, 1152, 1152, 1152, 2880, 2880, 288, 288, 144, 144, 72]
    payload = sum(lengths)
    reduce = owner_reduce_bytes_per_outer_step(
        share_bytes=[share_bytes(lengths, s) for s in owner_shares(lengths, clusters)]
    )
    gather = allgather_bytes_per_outer_step(payload_bytes=payload, n_clusters=clusters)
    assert reduce <= 2.0 * payload
    if clusters >= 4:
        assert reduce < gather / 1.4
    # The verdict statistics are reduced like the payload: 2(C−1)/C of them per cluster, not the
    # C−1 copies an all-gather of every owner's share would send.
    statistics = 8 * statistics_floats(clusters)
    assert reduce == pytest.approx(2 * (clusters - 1) / clusters * (payload + statistics))


@pytest.mark.parametrize(("floats", "owners"), [(46, 8), (5, 2), (3, 4), (20, 4)])
def test_statistics_chunks_split_the_sums_evenly_among_the_owners(floats: int, owners: int) -> None:
    chunks = statistics_chunks(floats, owners)
    assert len(chunks) == owners and sum(chunks) == floats
    assert max(chunks) - min(chunks) <= 1 and chunks == sorted(chunks, reverse=True)
    with pytest.raises(ConfigError, match="at least one owner"):
        statistics_chunks(floats, 0)
