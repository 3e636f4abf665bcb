"""Single-process stand-ins for the distributed runtime, shared by the outer-algorithm tests.

The all-gather of the runtime is simulated by a list in cluster order: that is exactly what
``torch.distributed.all_gather`` hands every rank.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trainer.outer import (
    Gathered,
    OuterAlgorithm,
    OuterConfig,
    OuterUpdate,
    RoundSignals,
    build_outer_algorithm,
)


def build_clusters(
    config: OuterConfig,
    named_params: Sequence[tuple[str, torch.Tensor]],
    n_clusters: int,
    seed: int = 7,
) -> list[OuterAlgorithm]:
    return [
        build_outer_algorithm(
            config, named_params=named_params, cluster=c, n_clusters=n_clusters, seed=seed
        )
        for c in range(n_clusters)
    ]


def local_drift(
    named_params: Sequence[tuple[str, torch.Tensor]], cluster: int, round: int, scale: float = 1e-3
) -> list[torch.Tensor]:
    """A deterministic stand-in for H inner steps: a low-rank direction that persists across
    rounds (training keeps going the same way, which outer momentum exploits), a part that
    changes every round, and a cluster-specific part (clusters see different data)."""
    persistent = torch.Generator().manual_seed(10_000)
    this_round = torch.Generator().manual_seed(10_001 + round)
    own = torch.Generator().manual_seed(20_000 + 100 * round + cluster)
    out = []
    for _, p in named_params:
        if p.dim() == 2:
            common = _low_rank(p.shape, persistent) + 0.5 * _low_rank(p.shape, this_round)
        else:
            common = torch.randn(p.shape, generator=persistent) + 0.5 * torch.randn(
                p.shape, generator=this_round
            )
        out.append(scale * (common + 0.3 * torch.randn(p.shape, generator=own)))
    return out


def _low_rank(shape: torch.Size, generator: torch.Generator, rank: int = 2) -> torch.Tensor:
    u = torch.randn(shape[0], rank, generator=generator)
    v = torch.randn(rank, shape[1], generator=generator)
    return u @ v / rank


SIGNALS = RoundSignals(mean_train_loss=3.0)


def start_locals(
    named_params: Sequence[tuple[str, torch.Tensor]], n_clusters: int
) -> list[list[torch.Tensor]]:
    """Every cluster's live parameters, starting from θ₀."""
    return [[p.clone() for _, p in named_params] for _ in range(n_clusters)]


def train_locals(
    locals_: Sequence[Sequence[torch.Tensor]],
    named_params: Sequence[tuple[str, torch.Tensor]],
    round: int,
) -> None:
    """'Inner steps': every cluster drifts from where it is (in place)."""
    for cluster, params in enumerate(locals_):
        for p, d in zip(params, local_drift(named_params, cluster, round), strict=True):
            p.sub_(d)


def blocking_round(
    algos: Sequence[OuterAlgorithm], locals_: Sequence[Sequence[torch.Tensor]], round: int
) -> list[OuterUpdate]:
    """contribution -> all_gather (a list) -> apply, on every cluster."""
    contributions = [a.contribution(round, local) for a, local in zip(algos, locals_, strict=True)]
    gathered = [c.payload for c in contributions]
    return [
        a.apply(round, Gathered(gathered), local, SIGNALS)
        for a, local in zip(algos, locals_, strict=True)
    ]
