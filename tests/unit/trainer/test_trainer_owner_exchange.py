"""The owner-reduce exchange over a real gloo group (trainer/runtime/owner_exchange.py): each
process sees only its share of the other clusters' payloads, and still every contributor ends
the round with the global parameters one process holding every payload computes -- what
``veritrain verify`` recomputes -- bit for bit. A listening member takes part without deadlock.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from unit.trainer.gloo_ranks import run_gloo_ranks

from trainer.outer import OuterConfig, OuterLoop, RoundSignals, build_outer_algorithm
from trainer.outer.accounting import (
    owner_reduce_cluster_bytes,
    statistics_chunks,
    statistics_floats,
)
from trainer.outer.algorithm import payload_digest
from trainer.outer.owner_reduce import (
    WholePayloads,
    apply_owned,
    owner_shares,
    share_bytes,
    stage_statistics,
)
from trainer.runtime.exchange import ClusterNumbers, ContributionHeader, RoundWire
from trainer.runtime.owner_exchange import start_owner_reduce

CONFIG = OuterConfig(
    kind="dilocox", rank=8, bits=2, dense_bits=8, exchange="owner-reduce", anomaly_scores=False
)
CONTRIBUTORS = 3
SIGNALS = RoundSignals(mean_train_loss=3.0)
NUMBERS = ClusterNumbers(
    train_loss=3.0, grad_norm=1.0, lr=1e-3, compute_seconds_per_step=0.1, comm_seconds=0.0
)


def _params() -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(5)
    return [
        ("a.weight", torch.randn(96, 48, generator=g) * 0.02),
        ("a.bias", torch.zeros(96)),
        ("b.weight", torch.randn(64, 48, generator=g) * 0.02),
        ("c.weight", torch.randn(80, 32, generator=g) * 0.02),
        ("ln.weight", torch.ones(48)),
    ]


def _loop(cluster: int) -> OuterLoop:
    loop = build_outer_algorithm(
        CONFIG, named_params=_params(), cluster=cluster, n_clusters=CONTRIBUTORS + 1, seed=3
    )
    assert isinstance(loop, OuterLoop)
    return loop


def _trained(cluster: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + cluster)
    return [p - 1e-3 * torch.randn(p.shape, generator=g) for _, p in _params()]


def _contributions() -> tuple[
    list[OuterLoop], dict[int, ContributionHeader], dict[int, torch.Tensor]
]:
    loops, headers, payloads = [], {}, {}
    for cluster in range(CONTRIBUTORS):
        loop = _loop(cluster)
        contribution = loop.contribution(0, _trained(cluster))
        loops.append(loop)
        payloads[cluster] = contribution.payload
        headers[cluster] = ContributionHeader(
            round=0,
            cluster=cluster,
            stage=0,
            digest=contribution.digest,
            length=contribution.payload.numel(),
            signature_object=None,
            commitments_object=None,
            stats={},
            numbers=NUMBERS,
            segments=list(contribution.segments),
        )
    return loops, headers, payloads


def _wire(headers: dict[int, ContributionHeader]) -> RoundWire:
    """Round 0 over the whole gloo world, every rank a member."""
    return RoundWire(
        round=0,
        signals=SIGNALS,
        headers=headers,
        members=list(range(dist.get_world_size())),
        group=dist.group.WORLD,
        fetch=None,
        on_done=None,
    )


def _member() -> tuple[list[np.ndarray], int]:
    rank = dist.get_rank()
    loops, headers, _ = _contributions()
    listening = rank >= CONTRIBUTORS
    loop = _loop(rank) if listening else loops[rank]
    wire = _wire(headers)
    pending = start_owner_reduce(None if listening else loop._pending[0], wire, cluster=rank)
    if listening:
        assert pending.wait() == {}
        return [], pending.bytes_sent
    local = _trained(rank)
    apply_owned(loop, 0, pending, local, SIGNALS)
    pending.finish()
    return [t.numpy() for t in loop.global_parameters()], pending.bytes_sent


def test_owners_over_gloo_reach_the_parameters_one_process_computes(tmp_path: Path) -> None:
    got = run_gloo_ranks(_member, CONTRIBUTORS + 1, tmp_path)
    loops, _, payloads = _contributions()
    lengths = loops[0].segment_codec().segment_lengths(0)
    apply_owned(loops[0], 0, WholePayloads(payloads, cluster=0), _trained(0), SIGNALS)
    expected = [t.numpy() for t in loops[0].global_parameters()]
    shares = [share_bytes(lengths, s) for s in owner_shares(lengths, CONTRIBUTORS)]
    for rank in range(CONTRIBUTORS):
        params, sent = got[rank]
        assert all(np.array_equal(a, b) for a, b in zip(params, expected, strict=True))
        # What went on the wire is what the record reports (accounting.py); never C−1 payloads.
        assert sent == owner_reduce_cluster_bytes(share_bytes=shares, owner=rank)
        assert sent < 2 * payloads[rank].numel()
    # The listener sent nothing: it takes part in every phase with empty splits.
    assert got[CONTRIBUTORS] == ([], 0)


def _reduced_statistics() -> tuple[list[list[float]], int] | None:
    """This member's owner-order sum of the statistics, reduced over the wire."""
    rank = dist.get_rank()
    loops, headers, _ = _contributions()
    wire = _wire(headers)
    listening = rank >= CONTRIBUTORS
    pending = start_owner_reduce(None if listening else loops[rank]._pending[0], wire, cluster=rank)
    if listening:  # every phase, with nothing of its own
        assert pending.wait() == {}
        return None
    segments = pending.segments()
    assert segments is not None
    share = pending.shares[pending.owner]
    mine = loops[rank].owner_statistics(0, segments, share, pending.payload_digests)
    reduced = pending.reduce_statistics(mine)
    assert reduced is not None
    pending.gather_means(None)  # the last phase, as an owner whose contributions were excluded
    pending.finish()
    return [list(row) for row in reduced.gram], pending.bytes_sent


def test_owners_sum_the_statistics_over_the_wire_as_one_process_sums_them(tmp_path: Path) -> None:
    """Each owner sums a chunk of the statistics in owner order and the sums are all-gathered:
    every contributor holds the Gram matrix ``veritrain verify`` computes from the payloads, to
    the last bit, having sent 2(C−1)/C of the statistics."""
    got = run_gloo_ranks(_reduced_statistics, CONTRIBUTORS + 1, tmp_path)
    loops, _, payloads = _contributions()
    digests = [payload_digest(payloads[c]) for c in range(CONTRIBUTORS)]
    expected = stage_statistics(loops[0], 0, [payloads[c] for c in range(CONTRIBUTORS)], digests)
    lengths = loops[0].segment_codec().segment_lengths(0)
    payload_part = [
        (CONTRIBUTORS - 1) * share_bytes(lengths, s) + sum(lengths) - share_bytes(lengths, s)
        for s in owner_shares(lengths, CONTRIBUTORS)
    ]
    floats = statistics_floats(CONTRIBUTORS)
    for rank in range(CONTRIBUTORS):
        gram, sent = got[rank]
        assert gram == [list(row) for row in expected.gram]  # exact float equality
        chunk = statistics_chunks(floats, CONTRIBUTORS)[rank]
        assert sent - payload_part[rank] == 8 * (floats - chunk + (CONTRIBUTORS - 1) * chunk)
    assert got[CONTRIBUTORS] is None
