"""The inner optimiser of one pipeline stage: AdamW, warm-up + cosine, clipping, tied grads.

One inner step after the pipeline's backward pass:

1. tied embeddings (S > 1): stage 0's ``embed.wte`` and the last stage's ``head.wte`` copy
   receive the *sum* of their two gradients (Megatron-LM's embedding all-reduce, Shoeybi et al.
   2019 §3), so both copies take identical AdamW steps and stay bit-equal;
2. AllReduce baseline only: gradients are all-reduced over the stage's outer group and divided
   by C (synchronous data parallelism -- the baseline DiLoCo is compared against);
3. the global gradient norm over the whole cluster (every stage, the tied matrix counted once)
   is computed from per-stage sums of squares gathered in stage order, and gradients are
   clipped to ``grad_clip`` -- all of it on the device, without a host sync: each stage's sum
   of squares is one float64 tensor, one all-gather brings every stage's, and the clipping
   factor multiplies the gradients as a tensor (the host reads the norm once per round, when
   the worker reports it);
4. the learning rate for this global inner step is set and AdamW steps.

The schedule is a function of the global inner step i: linear warm-up to ``lr`` over
``warmup_steps``, then cosine decay to ``lr * min_lr_ratio`` at the planned last step
(T * H); beyond it (adaptive H can run longer) it stays at the floor.

The schedule (``learning_rate``), the optimiser (``inner_adamw``) and the clipping rule
(``clip_to_norm``) are plain functions so that veritrain/bench/simulate.py, where the outer defaults
were measured, runs this very inner loop.

Precision (``TrainConfig.precision``): ``fp32`` runs everything in float32; ``bf16`` runs the
forward and backward passes under ``torch.autocast`` with bfloat16 (matrix products in
bfloat16, reductions such as softmax and the loss in float32, per autocast's op lists) while
parameters, gradients and AdamW's states stay float32 -- the usual mixed-precision recipe
(Micikevicius et al. 2018, with bfloat16 needing no loss scaling); ``fp64`` holds parameters
and activations in float64, a reference a re-execution can be compared against.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from trainer.config import InnerConfig
from trainer.errors import CheckpointError
from trainer.model import TIED_HEAD, StageModel


def learning_rate(config: InnerConfig, step: int, planned_steps: int) -> float:
    """The inner learning rate at global inner step ``step`` (0-based)."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    floor = config.lr * config.min_lr_ratio
    span = max(planned_steps - config.warmup_steps, 1)
    progress = min((step - config.warmup_steps) / span, 1.0)
    return floor + 0.5 * (config.lr - floor) * (1.0 + math.cos(math.pi * progress))


def inner_adamw(parameters: Iterable[torch.nn.Parameter], config: InnerConfig) -> torch.optim.AdamW:
    """AdamW over ``parameters`` with decoupled weight decay on 2-D weights only (matrices and
    embeddings; nanoGPT's convention). On CPU ``foreach=False``: one kernel per tensor, the same
    arithmetic on every run, bit for bit as it always was. On CUDA the fused kernel (one launch
    for every tensor, torch.optim.AdamW's ``fused``): each element's update is still computed
    by one thread in a fixed order, so it is as repeatable run to run as the per-tensor kernels,
    though not bit-equal to the CPU's (no GPU update is: another compiler contracts ``a·b + c``
    into one rounding)."""
    params = list(parameters)
    fused = bool(params) and params[0].device.type == "cuda"
    return torch.optim.AdamW(
        [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=config.lr,
        betas=(config.beta1, config.beta2),
        eps=config.eps,
        foreach=False,
        fused=True if fused else None,
    )


def square_sum(tensors: Iterable[torch.Tensor], device: torch.device) -> torch.Tensor:
    """Σ x² over every element as a float64 scalar tensor on ``device``, accumulated tensor by
    tensor in the given order -- the same float64 additions, in the same order, as summing the
    per-tensor values on the host, without reading any of them back."""
    total = torch.zeros((), dtype=torch.float64, device=device)
    for t in tensors:
        total += t.detach().double().pow(2).sum()
    return total


def sum_of_squares(tensors: Iterable[torch.Tensor]) -> float:
    """:func:`square_sum` on the CPU, read back as a float."""
    return float(square_sum(tensors, torch.device("cpu")))


def clip_to_norm(
    grads: Sequence[torch.Tensor], norm: float | torch.Tensor, max_norm: float
) -> None:
    """Scale ``grads`` in place so that their global L2 norm ``norm`` is at most ``max_norm``
    (0 disables clipping). A tensor ``norm`` stays on its device: every gradient is multiplied
    by the factor, 1 when no clipping is due (x * 1 is x, bit for bit), so no branch needs
    the norm's value on the host."""
    if max_norm <= 0:
        return
    if isinstance(norm, torch.Tensor):
        scale = torch.where(norm > max_norm, max_norm / (norm + 1e-6), torch.ones_like(norm))
        for g in grads:
            g.mul_(scale.to(g.device))
        return
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / (norm + 1e-6))


class InnerOptimizer:
    def __init__(
        self,
        module: StageModel,
        config: InnerConfig,
        *,
        planned_steps: int,
        pipeline: dist.ProcessGroup,
        embedding: dist.ProcessGroup | None,
        device: torch.device,
    ) -> None:
        self.module = module
        self.config = config
        self.planned_steps = planned_steps
        self.pipeline = pipeline
        self.embedding = embedding
        self.device = device
        self.named = list(module.named_parameters())
        self.optimizer = inner_adamw((p for _, p in self.named), config)
        self._index = {id(p): n for n, p in self.named}

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=False)
        for _, p in self.named:  # the first step has no .grad yet; later steps reuse buffers
            if p.grad is None:
                p.grad = torch.zeros_like(p)

    def step(
        self,
        inner_step: int,
        *,
        allreduce: dist.ProcessGroup | None,
        clusters: int,
        lr_scale: float = 1.0,
    ) -> InnerStepStats:
        """Steps 1-4 of the module docstring. ``allreduce`` is the outer group for the AllReduce
        baseline (None otherwise); ``lr_scale`` multiplies the schedule's rate (1 but in a
        forgery of trainer/runtime/forgery.py)."""
        grads = [p.grad for _, p in self.named if p.grad is not None]
        if self.embedding is not None:
            tied = self.module.tied_weight().grad
            assert tied is not None  # zero_grad gave every parameter a gradient buffer
            dist.all_reduce(
                tied, group=self.embedding
            )  # a + b == b + a: both copies get the same bits
        comm_seconds = 0.0
        if allreduce is not None:
            before = time.perf_counter()
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=allreduce)
            flat.div_(clusters)
            offset = 0
            for g in grads:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()
            comm_seconds = time.perf_counter() - before
        norm = self._global_norm()
        clip_to_norm(grads, norm, self.config.grad_clip)
        lr = learning_rate(self.config, inner_step, self.planned_steps) * lr_scale
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        sent = sum(g.numel() * g.element_size() for g in grads) if allreduce is not None else 0
        return InnerStepStats(norm=norm, lr=lr, comm_seconds=comm_seconds, bytes_sent=sent)

    def _global_norm(self) -> torch.Tensor:
        """L2 norm of the cluster's whole gradient, reduced in stage order on every stage: a
        float64 scalar on the device (no host sync). Bit for bit the value the host-side sum
        gave: the same float64 additions in the same order, then an IEEE square root."""
        # The tied matrix is counted once, on stage 0 (zero_grad gave every parameter a .grad).
        squares = square_sum(
            (
                p.grad
                for name, p in self.named
                if p.grad is not None and not (name == TIED_HEAD and self.module.holds_tied_copy)
            ),
            self.device,
        )
        per_stage = [torch.empty_like(squares) for _ in range(dist.get_world_size(self.pipeline))]
        dist.all_gather(per_stage, squares, group=self.pipeline)
        total = per_stage[0]
        for value in per_stage[1:]:  # stage order, as collectives.ordered_sum
            total = total + value
        return total.sqrt()

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """AdamW state by parameter name: ``<name>.exp_avg``, ``<name>.exp_avg_sq``,
        ``<name>.step``."""
        state: dict[str, torch.Tensor] = {}
        for name, p in self.named:
            for key, value in self.optimizer.state.get(p, {}).items():
                state[f"{name}.{key}"] = value.detach().cpu().contiguous().clone()
        return state

    def load_state_tensors(self, state: Mapping[str, torch.Tensor]) -> None:
        for name, p in self.named:
            keys = ("exp_avg", "exp_avg_sq", "step")
            present = [f"{name}.{k}" in state for k in keys]
            if not any(present):
                continue  # no step taken yet when this state was saved
            if not all(present):
                raise CheckpointError(
                    f"expected AdamW state {keys} for {name}, got only some of them"
                )
            # Moments follow the parameter's dtype and device: a state saved at one precision or
            # on one device resumes at another (an fp64 re-execution of an fp32 run, a CPU
            # re-execution of a CUDA step). The step counter is a CPU scalar, except for the
            # fused CUDA kernel, which reads it on the parameter's device.
            step_device = p.device if self.optimizer.defaults.get("fused") else "cpu"
            self.optimizer.state[p] = {
                k: state[f"{name}.{k}"].clone().to(p.device, p.dtype)
                if k != "step"
                else state[f"{name}.{k}"].clone().to(step_device)
                for k in keys
            }


@dataclass(frozen=True, slots=True, kw_only=True)
class InnerStepStats:
    norm: torch.Tensor
    """Global gradient norm before clipping, a float64 scalar still on the device."""
    lr: float
    comm_seconds: float
    """Time in the AllReduce baseline's gradient all-reduce (0 otherwise)."""
    bytes_sent: int
    """Gradient bytes this process contributed to the all-reduce (0 otherwise)."""

    @property
    def grad_norm(self) -> float:
        """The norm on the host (a device sync: read it once per round, not per step)."""
        return float(self.norm)
