"""Outer optimisation: pseudo-gradients, compression, the outer Nesterov step, one-step delay.

``build_outer_algorithm`` is the one entry point the runtime needs; see protocol.py for the call
order and docs/outer-algorithm.md for the algorithm and the measurements behind its defaults.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trainer.outer.adaptive import next_inner_steps
from trainer.outer.algorithm import OuterLoop, payload_digest
from trainer.outer.codec import Codec, DenseCodec
from trainer.outer.config import OuterConfig
from trainer.outer.judge import Examination, FullModelJudge, Judge, StageJudge
from trainer.outer.lowrank_codec import LowRankCodec
from trainer.outer.nesterov import HOME
from trainer.outer.protocol import (
    Anomaly,
    Contribution,
    Gathered,
    OuterAlgorithm,
    OuterUpdate,
    ResumableOuterAlgorithm,
    RoundSignals,
)

__all__ = [
    "Anomaly",
    "Contribution",
    "Examination",
    "FullModelJudge",
    "Gathered",
    "Judge",
    "OuterAlgorithm",
    "OuterConfig",
    "OuterLoop",
    "OuterUpdate",
    "ResumableOuterAlgorithm",
    "RoundSignals",
    "StageJudge",
    "build_outer_algorithm",
    "next_inner_steps",
    "payload_digest",
]


def build_outer_algorithm(
    config: OuterConfig,
    *,
    named_params: Sequence[tuple[str, torch.Tensor]],
    cluster: int,
    n_clusters: int,
    seed: int,
    judge: Judge | None = None,
) -> ResumableOuterAlgorithm:
    """The outer algorithm for one process: its stage's parameters (``named_params``, the
    initial values θ₀, copied to fp32), its cluster index and the run seed shared by every
    cluster (the low-rank bases are drawn from it, so every cluster must pass the same).
    The algorithm and its codec live on the host (``nesterov.HOME``) wherever the parameters
    train: a payload is the same bits whichever device computed the local parameters.
    ``judge`` joins this stage's view of each round to the rest of its cluster's (judge.py;
    default: this stage alone, no contribution scores)."""
    shapes = [p.shape for _, p in named_params]
    codec: Codec
    if config.compressed:
        codec = LowRankCodec(
            config, shapes=shapes, seed=seed, lag=2 if config.look_ahead else 1, device=HOME
        )
    else:
        codec = DenseCodec(shapes)
    return OuterLoop(
        config,
        named_params=named_params,
        codec=codec,
        cluster=cluster,
        n_clusters=n_clusters,
        judge=judge,
    )
