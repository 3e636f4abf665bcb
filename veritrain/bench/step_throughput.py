"""``veritrain bench throughput``: tokens/s, MFU and per-stage peak memory of inner steps.

Each of the S stages of one cluster is built and stepped in this process, on one device, as
trainer/memory.py's ``measure_stage_step`` runs it (the trainer's 1F1B schedule and AdamW,
with a stage's neighbours replaced by random tensors of the right shape):

* **peak memory** per stage: tensor bytes from building the stage through two inner steps
  (trainer/memory.py says how it is measured on CPU and on CUDA), next to the planner's
  estimate for the same stage (``plan(held="trainer")``) and their ratio;
* **tokens/s**: the tokens of one inner step over the sum of the stages' step times -- one
  device running every stage in turn, without the overlap a pipeline of S devices has;
* **MFU**: model FLOPs per second over the device's peak, with 6 FLOPs per parameter per
  token for forward and backward (Kaplan et al. 2020 §2.1) and 8 with recomputation (one
  more forward). The peak is ``--peak-tflops`` when given; otherwise the GPU's datasheet
  dense rate (device_peak.py, e.g. 989.5 for an H100 or H200 SXM in bf16), else a measured
  matrix product's rate, stated as such in the result. MFU never exceeds 100%
  (device_peak.py says how).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch

from trainer.config import Precision
from trainer.memory import StageStep, measure_stage_step
from trainer.planner import Placement, Workload, plan
from trainer.planner import Precision as PlannedPrecision
from trainer.presets import MODEL_PRESETS
from veritrain.bench.device_peak import bounded_peak, device_peak
from veritrain.errors import BenchError


@dataclass(frozen=True, kw_only=True)
class ThroughputBenchConfig:
    preset: str = "small"
    """Model preset (trainer/presets.py MODEL_PRESETS)."""
    device: Literal["cpu", "cuda"] = "cpu"
    precision: Precision = "fp32"
    activation_checkpointing: bool = False
    stages: int = 2
    micro_batches: int = 4
    micro_batch_size: int = 4
    timed_steps: int = 3
    """Inner steps timed per stage (after two measured and one warm-up step)."""
    peak_tflops: float | None = None
    """The device's peak FLOP/s in TFLOP/s; None: the datasheet's, else a measured rate."""
    threads: int | None = None
    """CPU intra-op threads (None: torch's default)."""
    commitments: bool = False
    """Also time the per-inner-step commitments the trainer makes (the audit's cost)."""


@dataclass(frozen=True, kw_only=True)
class StageResult:
    stage: int
    peak_bytes: int
    planned_bytes: float
    seconds_per_step: float
    commitment_seconds_per_step: float = 0.0

    @property
    def planned_over_measured(self) -> float:
        return self.planned_bytes / self.peak_bytes


@dataclass(frozen=True, kw_only=True)
class ThroughputResult:
    config: ThroughputBenchConfig
    device_name: str
    parameters: int
    tokens_per_step: int
    tokens_per_second: float
    flops_per_token: int
    peak_tflops: float
    peak_source: str
    stages: tuple[StageResult, ...] = field(default=())

    @property
    def mfu(self) -> float:
        return self.flops_per_token * self.tokens_per_second / (self.peak_tflops * 1e12)

    @property
    def commitment_seconds_per_step(self) -> float:
        """All stages' commitments after one inner step (0 when not measured)."""
        return sum(s.commitment_seconds_per_step for s in self.stages)

    @property
    def tokens_per_second_with_commitments(self) -> float:
        """The inner step's rate once each step also makes its commitments, as the trainer's
        inner loop does (the same as ``tokens_per_second`` when they were not measured)."""
        seconds = sum(s.seconds_per_step for s in self.stages) + self.commitment_seconds_per_step
        return self.tokens_per_step / seconds

    @property
    def peak_memory_bytes(self) -> int:
        """The largest stage's peak."""
        return max(s.peak_bytes for s in self.stages)

    def lines(self) -> list[str]:
        c = self.config
        out = [
            f"{c.preset} ({self.parameters:,} parameters), "
            f"S={c.stages}, {c.micro_batches} x {c.micro_batch_size} x "
            "context per inner step, "
            f"{c.precision}{', activation checkpointing' if c.activation_checkpointing else ''} "
            f"on {self.device_name}",
            f"  {self.tokens_per_second:,.0f} tokens/s (all stages in turn on one device), "
            f"MFU {self.mfu:.1%} of {self.peak_tflops:.3g} TFLOP/s ({self.peak_source}), "
            f"{self.flops_per_token // self.parameters} FLOPs per parameter per token",
            f"  {'stage':>5} {'peak MB':>9} {'planned MB':>11} {'planned/peak':>13} {'s/step':>8}",
        ]
        for s in self.stages:
            out.append(
                f"  {s.stage:>5} {s.peak_bytes / 1e6:9.2f} {s.planned_bytes / 1e6:11.2f} "
                f"{s.planned_over_measured:13.3f} {s.seconds_per_step:8.3f}"
            )
        if c.commitments:
            out.append(
                f"  commitments (digest + fingerprint on the host): "
                f"{self.commitment_seconds_per_step:.3f} s per inner step; with them "
                f"{self.tokens_per_second_with_commitments:,.0f} tokens/s = "
                f"{self.tokens_per_second_with_commitments / self.tokens_per_second:.2f} "
                "of the step alone"
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": asdict(self.config),
            "device_name": self.device_name,
            "parameters": self.parameters,
            "tokens_per_step": self.tokens_per_step,
            "tokens_per_second": self.tokens_per_second,
            "flops_per_token": self.flops_per_token,
            "peak_tflops": self.peak_tflops,
            "peak_source": self.peak_source,
            "mfu": self.mfu,
            "commitment_seconds_per_step": self.commitment_seconds_per_step,
            "tokens_per_second_with_commitments": self.tokens_per_second_with_commitments,
            "peak_memory_bytes": self.peak_memory_bytes,
            "stages": [
                {**asdict(s), "planned_over_measured": s.planned_over_measured} for s in self.stages
            ],
        }


def run_throughput_bench(
    config: ThroughputBenchConfig, say: Callable[[str], None] = lambda _: None
) -> ThroughputResult:
    if config.preset not in MODEL_PRESETS:
        raise BenchError(
            f"expected a model preset ({', '.join(MODEL_PRESETS)}), got {config.preset!r}"
        )
    if config.device == "cuda" and not torch.cuda.is_available():
        raise BenchError("--device cuda needs a CUDA device; none is visible")
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    model = MODEL_PRESETS[config.preset]
    device = torch.device(config.device)
    planned = plan(
        model,
        placement=Placement(clusters=2, stages=config.stages, data_parallel=1),
        workload=Workload(
            micro_batch_size=config.micro_batch_size,
            sequence_length=model.context,
            micro_batches=config.micro_batches,
            recompute=config.activation_checkpointing,
        ),
        precision=PlannedPrecision.of_trainer(config.precision),
        held="trainer",
    )
    steps: list[StageStep] = []
    for stage in range(config.stages):
        say(f"stage {stage}: measuring peak memory, then timing {config.timed_steps} inner steps")
        steps.append(
            measure_stage_step(
                model,
                stage=stage,
                stages=config.stages,
                micro_batches=config.micro_batches,
                micro_batch_size=config.micro_batch_size,
                precision=config.precision,
                activation_checkpointing=config.activation_checkpointing,
                device=device,
                timed_steps=config.timed_steps,
                commitments=config.commitments,
            )
        )
    tokens = steps[0].tokens_per_step
    parameters = model.parameter_count()
    flops_per_token = (8 if config.activation_checkpointing else 6) * parameters
    tokens_per_second = tokens / sum(s.seconds_per_step for s in steps)
    achieved = flops_per_token * tokens_per_second / 1e12
    if config.peak_tflops is not None:
        if config.peak_tflops < achieved:
            raise BenchError(
                f"expected --peak-tflops at least the {achieved:.3g} TFLOP/s the step achieved, "
                f"got {config.peak_tflops:g}: that is no peak (MFU would exceed 100%)"
            )
        peak, source = config.peak_tflops, "given"
    else:
        say("finding the device's peak (datasheet, else a matrix product's rate)")
        peak, source = bounded_peak(*device_peak(device, config.precision), achieved)
    return ThroughputResult(
        config=config,
        device_name=torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU ({torch.get_num_threads()} threads)",
        parameters=parameters,
        tokens_per_step=tokens,
        tokens_per_second=tokens_per_second,
        flops_per_token=flops_per_token,
        peak_tflops=peak,
        peak_source=source,
        stages=tuple(
            StageResult(
                stage=s.stage,
                peak_bytes=s.peak_bytes,
                planned_bytes=planned.stages[s.stage].inner_step_bytes,
                seconds_per_step=s.seconds_per_step,
                commitment_seconds_per_step=s.commitment_seconds_per_step,
            )
            for s in steps
        ),
    )
