"""Inner steps through ``torch.distributed.pipelining``: one stage per process.

Each process wraps its ``StageModel`` in a ``PipelineStage`` over its cluster's pipeline group
and drives it with ``Schedule1F1B`` (PipeDream-flush, Narayanan et al. 2021) or
``ScheduleGPipe`` (Huang et al. 2019). A batch of ``micro_batches * micro_batch_size`` sequences
is split into equal micro-batches; the loss is the mean next-token cross-entropy of each
micro-batch and the schedule divides gradients by the micro-batch count, so a step's gradient is
the gradient of the batch's mean loss -- the same as one process running the whole batch
(up to floating-point summation order).

Stage 0 feeds token ids, the last stage feeds targets and gets the losses; S = 1 is a single
stage that does both. Evaluation runs the same schedule forward-only under ``no_grad``. Both run
under the configuration's precision (``inner.autocast``), so a bf16 run also evaluates in bf16.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from trainer.config import Precision
from trainer.model import StageModel, language_model_loss
from trainer.precision import autocast


class PipelineRunner:
    def __init__(
        self,
        module: StageModel,
        *,
        stage: int,
        stages: int,
        group: dist.ProcessGroup,
        device: torch.device,
        schedule: str,
        micro_batches: int,
        precision: Precision = "fp32",
    ) -> None:
        self.module = module
        self.precision = precision
        self.stage = stage
        self.stages = stages
        self.device = device
        self.is_first = stage == 0
        self.is_last = stage == stages - 1
        # Imported here, not at the top: torch.distributed.pipelining pulls in dynamo, DTensor
        # and sympy (seconds on 2 cores), and `verify`, `reproduce` and the web server import
        # the trainer without ever building a pipeline. Training processes have it preloaded
        # by the launcher's forkserver (launch.py).
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        pipeline_stage = PipelineStage(module, stage, stages, device, group=group)
        schedule_class = Schedule1F1B if schedule == "1f1b" else ScheduleGPipe
        self._schedule = schedule_class(pipeline_stage, micro_batches, loss_fn=language_model_loss)

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor | None:
        """Forward and backward of one batch; gradients accumulate into ``.grad``. Returns the
        batch's mean loss on the last stage as a 0-d float32 tensor on the device, None
        elsewhere: reading it is left to the caller, once per round, so the inner loop never
        waits for the device (issue #15)."""
        losses: list[torch.Tensor] = []
        with autocast(self.precision, self.device):
            self._schedule.step(
                *self._inputs(inputs), **self._targets(targets, losses), return_outputs=False
            )
        return self._mean_tensor(losses)

    def evaluate(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float | None:
        """Mean loss over ``batches`` (forward only); None except on the last stage."""
        means: list[float] = []
        with torch.no_grad(), autocast(self.precision, self.device):
            for inputs, targets in batches:
                losses: list[torch.Tensor] = []
                self._schedule.eval(
                    *self._inputs(inputs), **self._targets(targets, losses), return_outputs=False
                )
                mean = self._mean(losses)
                if mean is not None:
                    means.append(mean)
        return sum(means) / len(means) if means else None

    def _inputs(self, inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (inputs.to(self.device),) if self.is_first else ()

    def _targets(self, targets: torch.Tensor, losses: list[torch.Tensor]) -> dict[str, Any]:
        return {"target": targets.to(self.device), "losses": losses} if self.is_last else {}

    def _mean_tensor(self, losses: list[torch.Tensor]) -> torch.Tensor | None:
        if not self.is_last:
            return None
        # Micro-batches are equal in size, so the batch mean is the mean of their means.
        return torch.stack([loss.detach().float() for loss in losses]).mean()

    def _mean(self, losses: list[torch.Tensor]) -> float | None:
        mean = self._mean_tensor(losses)
        return None if mean is None else float(mean.item())
