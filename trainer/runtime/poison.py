"""TESTS AND BENCHMARKS ONLY: make one cluster's contribution misbehave on purpose.

``TrainConfig.poison_for_testing`` names a cluster and a step; before that cluster computes its
contribution, its local parameters θ_local are rewritten so that its pseudo-gradient
Δ = θ_start − θ_local (θ_start: the parameters the round started from, the global ones in
blocking DiLoCo) becomes

* ``scale``: factor · Δ  (a cluster sending a blown-up update), or
* ``noise``: Gaussian noise with factor times Δ's RMS  (a cluster sending garbage).

The anomaly checks of trainer/outer must flag it in that round's ``OuterUpdate``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trainer.config import PoisonForTesting


def poison_local(
    local: Sequence[torch.Tensor], round_start: Sequence[torch.Tensor], poison: PoisonForTesting, *, seed: int
) -> None:
    """Rewrite ``local`` in place as described in the module docstring."""
    generator = torch.Generator().manual_seed(seed * 7919 + poison.step * 31 + poison.cluster)
    with torch.no_grad():
        for param, start in zip(local, round_start, strict=True):
            delta = start - param
            if poison.kind == "scale":
                delta = delta * poison.factor
            else:
                rms = delta.pow(2).mean().sqrt()
                delta = torch.randn(delta.shape, generator=generator).to(delta) * rms * poison.factor
            param.copy_(start - delta)
