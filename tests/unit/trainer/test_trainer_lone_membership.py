"""A lone cluster's membership (a run of one cluster): its quorum is the header it posted on
the channel, and its exchange hands back its own payload with the round's terms."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import torch

from trainer.outer.protocol import RoundSignals
from trainer.runtime.channel import ChannelAddress, RunChannel, serve_channel
from trainer.runtime.exchange import ClusterNumbers, ContributionHeader
from trainer.runtime.membership import ExchangeTerms, LoneMembership, post_header

NUMBERS = ClusterNumbers(
    train_loss=2.5, grad_norm=1.0, lr=1e-3, compute_seconds_per_step=0.1, comm_seconds=0.0
)


def test_a_lone_cluster_exchanges_its_own_payload_with_the_rounds_signals() -> None:
    store = serve_channel(0, host="127.0.0.1")
    channel = RunChannel(
        ChannelAddress("127.0.0.1", store.port), "lone", connect_timeout=timedelta(seconds=10)
    )
    payload = torch.arange(64, dtype=torch.uint8)
    digest = hashlib.sha256(payload.numpy().data).hexdigest()
    header = ContributionHeader(
        round=4,
        cluster=2,
        stage=0,
        digest=digest,
        length=64,
        signature_object=None,
        commitments_object=None,
        stats={},
        numbers=NUMBERS,
        segments=[64],
    )
    post_header(channel, header)
    lone = LoneMembership(cluster=2, stage=0, channel=channel)
    quorum = lone.quorum(4)
    assert (quorum.round, quorum.members, quorum.contributors) == (4, (2,), (2,))

    signals = RoundSignals(mean_train_loss=2.5)
    pending = lone.exchange(quorum, payload, ExchangeTerms(signals=signals, fetch=None))

    assert pending.round == 4
    assert pending.signals == signals
    assert pending.digests == {2: digest}
    gathered = pending.wait()
    assert list(gathered) == [2]
    assert torch.equal(gathered[2], payload)
    del store  # the store serves until dropped
