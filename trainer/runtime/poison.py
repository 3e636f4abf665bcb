"""TESTS AND BENCHMARKS ONLY: make one cluster's contribution misbehave on purpose.

What a faulty or malicious cluster can do to the pseudo-gradient Δ it sends (``attack``):

* ``scale``: factor · Δ (a blown-up update);
* ``noise``: Gaussian noise with factor times Δ's RMS, tensor by tensor (factor 1: noise of the
  update's own norm);
* ``sign``: −Δ (a sign flip: an update that undoes training);
* ``zero``: nothing (a free-rider);
* ``replay``: an earlier round's Δ sent again.

A lazy cluster (one that trains on other data, or takes fewer inner steps) changes how it
trains, not what it does to Δ: ``veritrain bench poison`` simulates it.

``TrainConfig.poison_for_testing`` names a cluster and a step; before that cluster computes its
contribution, :func:`poison_local` rewrites its local parameters θ_local so that its
pseudo-gradient Δ = θ_start − θ_local (θ_start: the parameters the round started from, the
global ones in blocking DiLoCo) becomes the attacked one. The verdicts of trainer/outer must
flag it in that round's ``OuterUpdate``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from trainer.config import PoisonForTesting

Attack = Literal["scale", "noise", "sign", "zero", "replay"]
ATTACKS: tuple[Attack, ...] = ("scale", "noise", "sign", "zero", "replay")


def attacked(
    attack: Attack,
    delta: Sequence[torch.Tensor],
    *,
    factor: float = 1.0,
    generator: torch.Generator | None = None,
    earlier: Sequence[torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """The pseudo-gradient a cluster sends instead of ``delta`` (module docstring)."""
    if attack == "scale":
        return [d * factor for d in delta]
    if attack == "sign":
        return [-d for d in delta]
    if attack == "zero":
        return [torch.zeros_like(d) for d in delta]
    if attack == "replay":
        if earlier is None:
            raise ValueError("expected the earlier round's pseudo-gradient to replay, got none")
        return [e.clone() for e in earlier]
    out = []
    for d in delta:
        rms = d.pow(2).mean().sqrt()
        out.append(torch.randn(d.shape, generator=generator).to(d) * rms * factor)
    return out


def poison_local(
    local: Sequence[torch.Tensor],
    round_start: Sequence[torch.Tensor],
    poison: PoisonForTesting,
    *,
    seed: int,
) -> None:
    """Rewrite ``local`` in place as described in the module docstring."""
    generator = torch.Generator().manual_seed(seed * 7919 + poison.step * 31 + poison.cluster)
    with torch.no_grad():
        delta = [start - param for param, start in zip(local, round_start, strict=True)]
        sent = attacked(poison.kind, delta, factor=poison.factor, generator=generator)
        for param, start, d in zip(local, round_start, sent, strict=True):
            param.copy_(start - d)
