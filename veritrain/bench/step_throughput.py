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
  more forward). The peak is ``--peak-tflops`` when given (a datasheet number, e.g. 989 for
  an H100 SXM's dense bf16); otherwise the faster rate of a 1024-square matrix product
  measured here in fp32 and in the step's arithmetic -- an achievable peak of this machine,
  not a datasheet number, and stated as such in the result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch

from trainer.config import Precision
from trainer.memory import StageStep, measure_stage_step
from trainer.planner import Placement, Workload, plan
from trainer.planner import Precision as PlannedPrecision
from trainer.presets import MODEL_PRESETS
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
    """The device's peak FLOP/s in TFLOP/s; None measures a matrix product's rate."""
    threads: int | None = None
    """CPU intra-op threads (None: torch's default)."""


@dataclass(frozen=True, kw_only=True)
class StageResult:
    stage: int
    peak_bytes: int
    planned_bytes: float
    seconds_per_step: float

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
            )
        )
    if config.peak_tflops is not None:
        peak, source = config.peak_tflops, "given"
    else:
        say("measuring the device's matrix-product rate")
        # The faster of fp32 and the step's arithmetic: on a CPU without bf16 units a bf16
        # product is slower than fp32, and the peak must bound what the step achieves.
        peak = max(matmul_tflops(device, "fp32"), matmul_tflops(device, config.precision))
        source = "measured matmul rate"
    tokens = steps[0].tokens_per_step
    parameters = model.parameter_count()
    return ThroughputResult(
        config=config,
        device_name=torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU ({torch.get_num_threads()} threads)",
        parameters=parameters,
        tokens_per_step=tokens,
        tokens_per_second=tokens / sum(s.seconds_per_step for s in steps),
        flops_per_token=(8 if config.activation_checkpointing else 6) * parameters,
        peak_tflops=peak,
        peak_source=source,
        stages=tuple(
            StageResult(
                stage=s.stage,
                peak_bytes=s.peak_bytes,
                planned_bytes=planned.stages[s.stage].inner_step_bytes,
                seconds_per_step=s.seconds_per_step,
            )
            for s in steps
        ),
    )


def matmul_tflops(
    device: torch.device, precision: Precision, *, size: int = 1024, repeats: int = 5
) -> float:
    """TFLOP/s of ``size``-square matrix products in the step's arithmetic (2 n³ FLOPs each)."""
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp64": torch.float64}[precision]
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    torch.mm(a, b)  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(repeats):
        torch.mm(a, b)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = (time.perf_counter() - started) / repeats
    return 2 * size**3 / seconds / 1e12
