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

HOME = torch.device("cpu")
"""Where the outer state lives, whatever device trains: the host. The outer step runs once per H
inner steps, so its cost is small next to theirs; on the host it is the same bits on every
machine (a GPU's elementwise kernels may fuse ``a + μ·b`` into one rounding, a CPU's do not), so a
CUDA-recorded step's θ is recomputed exactly on a CPU; and it leaves the accelerator's memory to
the model (OpenDiLoCo keeps its outer optimiser on the CPU for the same reason). The caller's
tensors may live anywhere: they are copied here explicitly."""


class OuterNesterov:
    """Global parameters of one stage shard and their outer momentum, both fp32, on the host."""

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
        self.params = [t.detach().to(HOME, torch.float32, copy=True).contiguous() for t in initial]
        self.momentum_buffers = [torch.zeros_like(p) for p in self.params]

    def step(self, pseudo_gradient: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Apply one outer step; returns the update ``lr·u`` that was subtracted (for stats)."""
        updates = []
        for param, buf, grad in zip(
            self.params, self.momentum_buffers, _home(pseudo_gradient), strict=True
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
            self.params, self.momentum_buffers, _home(pseudo_gradient), strict=True
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


def _home(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """``tensors`` as fp32 on the host (no copy when they already are)."""
    return [t.to(HOME, torch.float32) for t in tensors]
