"""The outer optimiser: SGD with (Nesterov) momentum on fp32 global parameters.

DiLoCo (Douillard et al. 2023, arXiv 2311.08105, Algorithm 1) treats the averaged
pseudo-gradient ``Δ = θ_global − θ_local`` as a gradient and steps the global parameters with
Nesterov SGD, lr 0.7, momentum 0.9. The rule is PyTorch's ``torch.optim.SGD(nesterov=True)``
(dampening 0, no weight decay), written out so the state is ours to checkpoint and every
operation is an in-place elementwise kernel (bitwise deterministic on CPU)::

    b ← μ·b + Δ
    u ← Δ + μ·b        (Nesterov)   or   u ← b   (heavy ball)
    θ ← θ − lr·u
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from trainer.outer.errors import OuterStateError


class OuterNesterov:
    """Global parameters of one stage shard and their outer momentum, both fp32."""

    def __init__(
        self,
        *,
        names: Sequence[str],
        initial: Sequence[torch.Tensor],
        lr: float,
        momentum: float,
        nesterov: bool,
    ) -> None:
        self.names = list(names)
        self.lr = lr
        self.momentum = momentum
        self.nesterov = nesterov
        # Copies: the caller's tensors are the live model and will be trained in place.
        self.params = [t.detach().to(torch.float32, copy=True).contiguous() for t in initial]
        self.momentum_buffers = [torch.zeros_like(p) for p in self.params]

    def step(self, pseudo_gradient: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Apply one outer step; returns the update ``lr·u`` that was subtracted (for stats)."""
        updates = []
        for param, buf, grad in zip(
            self.params, self.momentum_buffers, pseudo_gradient, strict=True
        ):
            buf.mul_(self.momentum).add_(grad)
            direction = grad.add(buf, alpha=self.momentum) if self.nesterov else buf.clone()
            direction.mul_(self.lr)
            param.sub_(direction)
            updates.append(direction)
        return updates

    def lookahead(self, pseudo_gradient: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Where ``step(pseudo_gradient)`` would put the parameters, leaving the state alone."""
        out = []
        for param, buf, grad in zip(
            self.params, self.momentum_buffers, pseudo_gradient, strict=True
        ):
            virtual = buf.mul(self.momentum).add_(grad)
            direction = grad.add(virtual, alpha=self.momentum) if self.nesterov else virtual
            out.append(param.sub(direction, alpha=self.lr))
        return out

    def state_dict(self, prefix: str) -> dict[str, torch.Tensor]:
        state = {}
        for name, param, buf in zip(self.names, self.params, self.momentum_buffers, strict=True):
            state[f"{prefix}global.{name}"] = param.clone()
            state[f"{prefix}momentum.{name}"] = buf.clone()
        return state

    def load_state_dict(self, state: Mapping[str, torch.Tensor], prefix: str) -> None:
        for name, param, buf in zip(self.names, self.params, self.momentum_buffers, strict=True):
            for key, target in (
                (f"{prefix}global.{name}", param),
                (f"{prefix}momentum.{name}", buf),
            ):
                if key not in state:
                    raise OuterStateError(f"expected key {key!r} in the outer state, it is missing")
                source = state[key]
                if source.shape != target.shape:
                    raise OuterStateError(
                        f"expected {key} of shape {tuple(target.shape)}, got {tuple(source.shape)}"
                    )
                target.copy_(source)
