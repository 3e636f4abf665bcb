"""Peak memory of a pipeline stage's training step, measured.

What counts is the bytes held by tensors -- weights, gradients, optimiser states, activations
kept for the backward pass and the temporaries of each kernel -- not the process's resident
size (the interpreter, libraries and allocator caches, which no planner can predict):

* on CUDA, ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``: the caching
  allocator's own count of bytes in live tensors;
* on CPU, the allocator has no such counter, so :class:`PeakMemory` runs the step under
  ``torch.profiler`` with ``profile_memory=True``: every allocation and free of a CPU tensor's
  storage is an event with its size, and the peak is the highest running sum of those events
  in time order. It counts from zero when the measurement starts, so a measurement that starts
  before the stage is built sees all of the stage's tensors. The profiler makes the step slow:
  measure memory and time in separate steps.

:func:`measure_stage_step` builds stage ``s`` of ``S`` and runs inner steps as the trainer's
1F1B schedule drives it (trainer/runtime/pipeline.py): up to ``S - s`` micro-batches in flight
between their forward and backward, then AdamW after clipping (trainer/runtime/inner.py), with
gradient buffers kept between steps as ``InnerOptimizer.zero_grad`` keeps them. It runs in one
process: the activations a stage receives from its predecessor, and the gradients it receives
from its successor, are random tensors of the right shape and dtype.
"""

from __future__ import annotations

import time
import types
from collections import deque
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

from trainer.config import InnerConfig, Precision
from trainer.model import ModelConfig, build_stage, language_model_loss
from trainer.precision import autocast, parameter_dtype
from trainer.runtime.inner import clip_to_norm, inner_adamw, square_sum

MEMORY_EVENT = "[memory]"
"""The profiler's name for an allocation (positive bytes) or a free (negative)."""


class PeakMemory:
    """``with PeakMemory(device) as peak: ...`` then ``peak.bytes``: the most bytes tensors held
    on ``device`` at once inside the block (module docstring)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.bytes = 0
        self._profile: profile | None = None

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._profile = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            self._profile.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: types.TracebackType | None,
    ) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.bytes = int(torch.cuda.max_memory_allocated(self.device))
            return
        assert self._profile is not None  # set by __enter__
        self._profile.stop()
        if kind is None:
            self.bytes = peak_of_events(self._profile)


def peak_of_events(prof: profile) -> int:
    """The highest running sum of a CPU profile's allocation events, in time order."""
    results = prof.profiler.kineto_results if prof.profiler is not None else None
    if results is None:
        return 0
    events = sorted(
        (event.start_ns(), event.nbytes())  # type: ignore[attr-defined]
        for event in results.events()
        if event.name() == MEMORY_EVENT and event.device_type() == torch.autograd.DeviceType.CPU  # type: ignore[attr-defined]
    )
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


@dataclass(frozen=True, kw_only=True)
class StageStep:
    """One stage's measured inner step."""

    stage: int
    peak_bytes: int
    """Peak tensor bytes from building the stage to the end of its last step."""
    seconds_per_step: float
    """Wall time of one inner step, timed without the profiler (0 when not timed)."""
    tokens_per_step: int
    """Tokens one inner step trains on (micro_batches * micro_batch_size * context)."""
    commitment_seconds_per_step: float = 0.0
    """Wall time of one inner step's commitments (0 when not measured)."""


def measure_stage_step(
    model: ModelConfig,
    *,
    stage: int,
    stages: int,
    micro_batches: int,
    micro_batch_size: int,
    precision: Precision = "fp32",
    activation_checkpointing: bool = False,
    device: torch.device | None = None,
    timed_steps: int = 0,
    seed: int = 0,
    commitments: bool = False,
) -> StageStep:
    """Peak memory of stage ``stage`` over its construction and two inner steps (the second
    one holds AdamW's states, created by the first), then ``timed_steps`` more steps timed
    without the profiler. With ``commitments``, the per-inner-step commitments the trainer
    makes after each step (trainer/runtime/commitments.py: digest and fingerprint of the
    stage's parameters, on the host) are timed apart, ``timed_steps`` times, after a first one
    that builds the fingerprint's buckets."""
    device = device or torch.device("cpu")
    generator = torch.Generator(device="cpu").manual_seed(seed)
    runner: _StageRunner | None = None
    with PeakMemory(device) as peak:
        runner = _StageRunner(
            model,
            stage=stage,
            stages=stages,
            micro_batches=micro_batches,
            micro_batch_size=micro_batch_size,
            precision=precision,
            activation_checkpointing=activation_checkpointing,
            device=device,
            generator=generator,
            seed=seed,
        )
        runner.step()
        runner.step()
    seconds = 0.0
    if timed_steps:
        runner.step()  # warm-up outside the profiler
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        for _ in range(timed_steps):
            runner.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = (time.perf_counter() - started) / timed_steps
    commitment_seconds = 0.0
    if timed_steps and commitments:
        from trainer.runtime.commitments import StageCommitments

        stage_commitments = StageCommitments(
            list(runner.module.named_parameters()), run_id="bench", cluster=0, stage=stage
        )
        stage_commitments.after_inner_step(0)  # builds the buckets once, as a process does
        started = time.perf_counter()  # the copy to the host waits for the device anyway
        for inner_step in range(1, timed_steps + 1):
            stage_commitments.after_inner_step(inner_step)
        commitment_seconds = (time.perf_counter() - started) / timed_steps
    return StageStep(
        stage=stage,
        peak_bytes=peak.bytes,
        seconds_per_step=seconds,
        tokens_per_step=micro_batches * micro_batch_size * model.context,
        commitment_seconds_per_step=commitment_seconds,
    )


class _StageRunner:
    """One stage's inner steps as the 1F1B schedule and InnerOptimizer run them."""

    def __init__(
        self,
        model: ModelConfig,
        *,
        stage: int,
        stages: int,
        micro_batches: int,
        micro_batch_size: int,
        precision: Precision,
        activation_checkpointing: bool,
        device: torch.device,
        generator: torch.Generator,
        seed: int,
    ) -> None:
        self.model, self.precision, self.device, self.generator = (
            model,
            precision,
            device,
            generator,
        )
        self.first, self.last = stage == 0, stage == stages - 1
        self.micro_batches, self.micro_batch_size = micro_batches, micro_batch_size
        self.in_flight = min(stages - stage, micro_batches)  # 1F1B: stage s holds up to S - s
        self.dtype = parameter_dtype(precision)
        self.module = build_stage(
            model,
            stage=stage,
            n_stages=stages,
            seed=seed,
            activation_checkpointing=activation_checkpointing,
        ).to(device, dtype=self.dtype)
        self.config = InnerConfig()
        self.optimizer = inner_adamw(self.module.parameters(), self.config)
        self.params = list(self.module.parameters())
        for p in self.params:  # InnerOptimizer.zero_grad keeps one gradient buffer per parameter
            p.grad = torch.zeros_like(p)

    def step(self) -> None:
        for p in self.params:
            assert p.grad is not None  # allocated in __init__, zeroed in place
            p.grad.zero_()
        pending: deque[torch.Tensor] = deque()
        with autocast(self.precision, self.device):
            for _ in range(self.micro_batches):
                pending.append(self._forward())
                if len(pending) == self.in_flight:
                    self._backward(pending.popleft())
            while pending:
                self._backward(pending.popleft())
        grads = [p.grad for p in self.params if p.grad is not None]
        norm = square_sum(grads, self.device).sqrt()
        clip_to_norm(grads, norm, self.config.grad_clip)
        self.optimizer.step()

    def _forward(self) -> torch.Tensor:
        shape = (self.micro_batch_size, self.model.context)
        if self.first:
            inputs = torch.randint(0, self.model.vocab_size, shape, generator=self.generator).to(
                self.device
            )
        else:  # the predecessor's output: the fp32 (fp64) residual stream
            hidden = torch.randn(
                *shape, self.model.hidden_size, generator=self.generator, dtype=self.dtype
            )
            inputs = hidden.to(self.device).requires_grad_()
        out = self.module(inputs)
        if self.last:
            targets = torch.randint(0, self.model.vocab_size, shape, generator=self.generator).to(
                self.device
            )
            out = language_model_loss(out, targets) / self.micro_batches
        assert isinstance(out, torch.Tensor)
        return out

    def _backward(self, out: torch.Tensor) -> None:
        if self.last:
            out.backward()  # type: ignore[no-untyped-call]
        else:  # the successor's gradient with respect to this stage's output
            grad = torch.randn(out.shape, generator=self.generator, dtype=out.dtype).to(self.device)
            out.backward(grad)  # type: ignore[no-untyped-call]
