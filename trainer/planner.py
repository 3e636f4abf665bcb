"""Will a model fit, and how long will its communication take? Pure arithmetic on shapes.

``plan(model, placement=..., ...)`` answers two questions for C clusters x S pipeline stages x
D data-parallel replicas per stage, without building a tensor:

* **memory per GPU**, stage by stage: working weights, gradients, the inner AdamW state, the
  outer algorithm's fp32 global copy and momentum, the error-feedback residual, the one-step-
  delay references, activations (with the micro-batch, sequence length and recomputation
  assumptions stated in ``Workload``) and a fixed headroom;
* **time per outer step** on the inter-cluster link: the AllReduce baseline's gradient
  all-reduce every inner step against DiLoCoX's one compressed all-gather per outer step, both
  from the byte formulas of ``trainer/outer/accounting.py``, next to the compute time the
  workload implies (6 FLOPs per parameter per token for forward + backward, Kaplan et al. 2020
  §2.1; 8 with full recomputation, one extra forward).

What is held where follows this repository's implementation (docs/trainer.md,
docs/outer-algorithm.md) on GPUs with mixed precision (``Precision``): the inner optimiser,
the outer state, the residual and the references are sharded over the D replicas of a stage
(DiLoCoX Fig. 1: "each worker maintains distributed inner and outer optimizers' state"), or
kept in host memory with ``offload_outer``. Deliberate simplifications: no tensor
parallelism, the pipeline bubble is folded into the MFU, and the baseline's all-reduce is not
overlapped with the backward pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from trainer.errors import ConfigError
from trainer.model import TIED_EMBEDDING, TIED_HEAD, ModelConfig, stage_layout
from trainer.outer.accounting import allgather_bytes_per_outer_step, allreduce_bytes_per_outer_step
from trainer.outer.config import OuterConfig
from trainer.outer.quantize import encoded_length

Held = Literal["paper", "trainer"]
HELD = (
    "paper: the DiLoCoX setting on GPUs -- bf16 weights and gradients, fp32 master weights, "
    "inner and outer state sharded over the D replicas (ZeRO-1; the trainer does NOT shard "
    "them), optional host offload of the outer state (the trainer always offloads it), fused "
    "attention, fixed headroom",
    "trainer: what trainer/runtime holds today -- fp32 parameters, gradients and AdamW moments "
    "(plus bf16 weight copies under autocast), every tensor whole on every replica, the "
    "outer state in host memory, "
    "activations as eager autograd keeps them in trainer/model.py, no headroom (tensor bytes "
    "only, what trainer/memory.py measures)",
)
"""The two descriptions ``plan(held=...)`` can use."""
GB = 1e9
"""Decimal gigabytes, as GPU memory is sold (80 GB A800)."""
SHORT_NAMES = {
    "inner AdamW state": "AdamW",
    "outer global copy": "outer θ",
    "outer momentum": "momentum",
    "error feedback": "residual",
    "one-step-delay references": "refs",
    "activations": "activ.",
    "gradients": "grads",
}
"""Column headers of ``Plan.lines``."""


@dataclass(frozen=True, kw_only=True)
class Placement:
    """How the model is laid out over GPUs."""

    clusters: int = 2
    """C: outer replicas, joined by the slow link."""
    stages: int = 8
    """S: pipeline stages per replica (one GPU each, per data-parallel replica)."""
    data_parallel: int = 2
    """D: data-parallel replicas of each stage inside a cluster (fast fabric)."""

    def __post_init__(self) -> None:
        for name in ("clusters", "stages", "data_parallel"):
            if getattr(self, name) < 1:
                raise ConfigError(f"Placement.{name} must be >= 1, got {getattr(self, name)}")

    @property
    def gpus_per_cluster(self) -> int:
        return self.stages * self.data_parallel


@dataclass(frozen=True, kw_only=True)
class Workload:
    """What one inner step processes, and how activations are kept."""

    micro_batch_size: int = 1
    """Sequences per micro-batch."""
    sequence_length: int = 4096
    """Tokens per sequence."""
    micro_batches: int = 0
    """Micro-batches per data-parallel replica per inner step; 0 means S, the fewest the 1F1B
    schedule accepts."""
    recompute: bool = True
    """Full activation recomputation: each block keeps only its input and recomputes the rest
    during the backward pass (Chen et al. 2016; Korthikanti et al. 2022)."""

    def __post_init__(self) -> None:
        for name in ("micro_batch_size", "sequence_length"):
            if getattr(self, name) < 1:
                raise ConfigError(f"Workload.{name} must be >= 1, got {getattr(self, name)}")
        if self.micro_batches < 0:
            raise ConfigError(f"Workload.micro_batches must be >= 0, got {self.micro_batches}")


@dataclass(frozen=True, kw_only=True)
class Precision:
    """Bytes per element of each kind of state (mixed precision, Micikevicius et al. 2018)."""

    weights: int = 2
    """bf16 working weights."""
    gradients: int = 2
    """bf16 gradients."""
    inner_optimizer: int = 12
    """AdamW: fp32 master weights + first and second moments."""
    outer: int = 4
    """fp32: the outer algorithm's global copy, momentum, residual and references."""
    activations: int = 2
    """bf16 activations."""

    @classmethod
    def of_trainer(cls, precision: str) -> Precision:
        """What this trainer holds at ``TrainConfig.precision`` (trainer/runtime/inner.py):
        fp32 parameters and gradients (fp64 at ``fp64``), AdamW's two moments next to them (the
        parameters are the master weights: no separate copy); under ``bf16`` autocast also a
        bf16 copy of every weight matrix, cached for the step (``weights`` 4 + 2)."""
        if precision not in ("fp32", "bf16", "fp64"):
            raise ConfigError(f"expected precision fp32, bf16 or fp64, got {precision!r}")
        size = 8 if precision == "fp64" else 4
        return cls(
            weights=size + (2 if precision == "bf16" else 0),
            gradients=size,
            inner_optimizer=2 * size,
            outer=4,
            activations=2 if precision == "bf16" else size,
        )


@dataclass(frozen=True, kw_only=True)
class Accelerator:
    """One GPU."""

    name: str = "A800 80GB"
    memory_gb: float = 80.0
    peak_tflops: float = 312.0
    """Dense bf16 tensor-core peak; the A800 is the A100 SXM4 with NVLink capped at 400 GB/s,
    so it keeps the A100's 312 TFLOP/s (NVIDIA A100 datasheet)."""
    mfu: float = 0.4
    """Model FLOPs utilisation assumed for compute time (pipeline bubble included)."""
    headroom_gb: float = 6.0
    """CUDA context, communication buffers and allocator fragmentation."""

    def __post_init__(self) -> None:
        if not self.memory_gb > 0 or not self.peak_tflops > 0 or not 0 < self.mfu <= 1:
            raise ConfigError(
                f"Accelerator needs memory_gb > 0, peak_tflops > 0 and mfu in (0, 1], got "
                f"{self.memory_gb}, {self.peak_tflops}, {self.mfu}"
            )


@dataclass(frozen=True, kw_only=True)
class MemoryItem:
    name: str
    bytes: float
    note: str


@dataclass(frozen=True, kw_only=True)
class StageMemory:
    """Memory of one GPU holding stage ``stage`` (every data-parallel replica is alike)."""

    stage: int
    parameters: int
    """Parameters held by the stage (a tied copy of the embedding included)."""
    items: tuple[MemoryItem, ...]
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        return sum(item.bytes for item in self.items)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    @property
    def inner_step_bytes(self) -> float:
        """Weights, gradients, AdamW state and activations: what one inner step holds without
        the outer algorithm's tensors and headroom (what trainer/memory.py measures)."""
        names = ("weights", "gradients", "inner AdamW state", "activations")
        return sum(item.bytes for item in self.items if item.name in names)


@dataclass(frozen=True, kw_only=True)
class CommPlan:
    """One cluster's inter-cluster traffic and the times it implies (seconds, bytes)."""

    link_mbit: float
    inner_steps: int
    tokens_per_inner_step: int
    """Tokens one cluster trains on per inner step."""
    compute_seconds_per_inner_step: float
    allreduce_bytes_per_inner_step: float
    allreduce_comm_seconds_per_inner_step: float
    dilocox_payload_bytes: float
    """One cluster's payload per round, all stages (payload_bytes; one-sided: the mean of the
    two alternating sides)."""
    dilocox_bytes_per_outer_step: float
    dilocox_comm_seconds_per_outer_step: float
    overlapped: bool

    @property
    def allreduce_comm_fraction(self) -> float:
        """Share of the baseline's step time spent communicating."""
        comm = self.allreduce_comm_seconds_per_inner_step
        return comm / (comm + self.compute_seconds_per_inner_step)

    @property
    def allreduce_seconds_per_outer_step(self) -> float:
        return self.inner_steps * (
            self.compute_seconds_per_inner_step + self.allreduce_comm_seconds_per_inner_step
        )

    @property
    def dilocox_exposed_seconds_per_outer_step(self) -> float:
        """Communication not hidden: all of it when blocking; with the one-step delay only
        what outlasts the next round's H inner steps."""
        comm = self.dilocox_comm_seconds_per_outer_step
        if not self.overlapped:
            return comm
        return max(0.0, comm - self.inner_steps * self.compute_seconds_per_inner_step)

    @property
    def dilocox_seconds_per_outer_step(self) -> float:
        return (
            self.inner_steps * self.compute_seconds_per_inner_step
            + self.dilocox_exposed_seconds_per_outer_step
        )

    @property
    def bytes_ratio(self) -> float:
        """AllReduce bytes / DiLoCoX bytes for the same tokens."""
        return (
            self.inner_steps
            * self.allreduce_bytes_per_inner_step
            / self.dilocox_bytes_per_outer_step
        )

    @property
    def speedup(self) -> float:
        """DiLoCoX tokens/s over the baseline's, from the two step times."""
        return self.allreduce_seconds_per_outer_step / self.dilocox_seconds_per_outer_step

    @property
    def inner_steps_to_hide(self) -> int:
        """The smallest H whose compute covers one DiLoCoX exchange."""
        return max(
            1,
            math.ceil(
                self.dilocox_comm_seconds_per_outer_step / self.compute_seconds_per_inner_step
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        derived = (
            "allreduce_comm_fraction",
            "allreduce_seconds_per_outer_step",
            "dilocox_exposed_seconds_per_outer_step",
            "dilocox_seconds_per_outer_step",
            "bytes_ratio",
            "speedup",
            "inner_steps_to_hide",
        )
        return {**asdict(self), **{name: getattr(self, name) for name in derived}}


@dataclass(frozen=True, kw_only=True)
class Plan:
    model: ModelConfig
    parameters: int
    placement: Placement
    workload: Workload
    precision: Precision
    accelerator: Accelerator
    outer: OuterConfig
    offload_outer: bool
    stages: tuple[StageMemory, ...]
    comm: CommPlan
    assumptions: tuple[str, ...] = field(default=())
    held: Held = "paper"
    """What a stage is assumed to hold (:data:`HELD`)."""

    @property
    def fits(self) -> bool:
        return all(stage.fits for stage in self.stages)

    def lines(self) -> list[str]:
        """The plan for a person: memory per GPU by stage, then the link."""
        p, c, gb = self.placement, self.comm, self.accelerator.memory_gb
        out = [
            f"{self.parameters / 1e9:,.2f} B parameters on "
            f"C={p.clusters} clusters x S={p.stages} stages x "
            f"D={p.data_parallel} replicas ({p.gpus_per_cluster} "
            f"GPUs per cluster, {self.accelerator.name})",
            f"memory per GPU (GB; capacity {gb:g}):",
        ]
        names = [SHORT_NAMES.get(item.name, item.name) for item in self.stages[0].items]
        out.append(
            "  "
            + f"{'stage':>5} {'params':>7}  "
            + " ".join(f"{n:>8}" for n in names)
            + f"  {'total':>7}"
        )
        for stage in self.stages:
            cells = " ".join(f"{item.bytes / GB:8.1f}" for item in stage.items)
            verdict = (
                "fits"
                if stage.fits
                else f"DOES NOT FIT (+{(stage.total_bytes - stage.capacity_bytes) / GB:.1f})"
            )
            out.append(
                f"  {stage.stage:>5} {stage.parameters / 1e9:6.2f}B "
                f" {cells}  {stage.total_bytes / GB:7.1f}  {verdict}"
            )
        out.append(f"  -> {'fits' if self.fits else 'does NOT fit'} in {gb:g} GB per GPU")
        out += [f"  assumes {line}" for line in self.assumptions]
        out += [
            f"per outer step (H={c.inner_steps}) on a {c.link_mbit:g} "
            f"Mbit/s link, {c.tokens_per_inner_step:,} tokens "
            f"per cluster per inner step:",
            f"  compute             {c.compute_seconds_per_inner_step:12,.1f} s per inner step",
            "  AllReduce           "
            f"{c.allreduce_bytes_per_inner_step / 1e9:12,.2f} GB per inner step -> "
            f"{c.allreduce_comm_seconds_per_inner_step:,.0f} s; "
            f"{c.allreduce_seconds_per_outer_step:,.0f} s per outer step "
            f"({c.allreduce_comm_fraction:.2%} communicating)",
            f"  DiLoCoX (rank {self.outer.rank}, int{self.outer.bits}"
            f"{', 1-D int8' if self.outer.dense_bits == 8 else ''}) "
            f" {c.dilocox_payload_bytes / 1e6:,.1f} MB per round -> "
            f"{c.dilocox_comm_seconds_per_outer_step:,.1f} s, exposed "
            f"{c.dilocox_exposed_seconds_per_outer_step:,.1f} s "
            f"({'one-step-delay overlap' if c.overlapped else 'blocking'}); "
            f"hidden from H >= {c.inner_steps_to_hide}",
            f"  bytes AllReduce/DiLoCoX {c.bytes_ratio:,.0f}x, estimated speedup {c.speedup:,.1f}x",
        ]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.to_dict(),
            "parameters": self.parameters,
            "placement": asdict(self.placement),
            "workload": asdict(self.workload),
            "precision": asdict(self.precision),
            "accelerator": asdict(self.accelerator),
            "outer": {
                "rank": self.outer.rank,
                "bits": self.outer.bits,
                "overlapped": self.outer.overlapped,
                "error_feedback": self.outer.error_feedback,
                "offload_outer": self.offload_outer,
            },
            "fits": self.fits,
            "held": self.held,
            "stages": [
                {
                    "stage": s.stage,
                    "parameters": s.parameters,
                    "total_bytes": s.total_bytes,
                    "fits": s.fits,
                    "items": [asdict(item) for item in s.items],
                }
                for s in self.stages
            ],
            "comm": self.comm.to_dict(),
            "assumptions": list(self.assumptions),
        }


# --------------------------------------------------------------------------------------------
# Shapes


def stage_parameter_shapes(
    model: ModelConfig, *, stage: int, stages: int
) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every parameter stage ``stage`` holds, in ``trainer.model.StageModel``'s
    order and names (a unit test checks them against a built stage)."""
    d, f, kv = model.hidden_size, model.intermediate_size, model.kv_dim
    shapes: list[tuple[str, tuple[int, ...]]] = []
    first, last = stage == 0, stage == stages - 1
    if first:
        shapes.append((TIED_EMBEDDING, (model.vocab_size, d)))
    for i in stage_layout(model.num_hidden_layers, stages)[stage]:
        p = f"model.layers.{i}"
        for proj, rows in (("q_proj", d), ("k_proj", kv), ("v_proj", kv)):
            shapes.append((f"{p}.self_attn.{proj}.weight", (rows, d)))
            if model.attention_bias:
                shapes.append((f"{p}.self_attn.{proj}.bias", (rows,)))
        shapes += [
            (f"{p}.self_attn.o_proj.weight", (d, d)),
            (f"{p}.mlp.gate_proj.weight", (f, d)),
            (f"{p}.mlp.up_proj.weight", (f, d)),
            (f"{p}.mlp.down_proj.weight", (d, f)),
            (f"{p}.input_layernorm.weight", (d,)),
            (f"{p}.post_attention_layernorm.weight", (d,)),
        ]
    if last:
        shapes.append(("model.norm.weight", (d,)))
        # Tied on one stage, the head is the embedding matrix itself.
        if not (model.tie_word_embeddings and first):
            shapes.append((TIED_HEAD, (model.vocab_size, d)))
    return shapes


def payload_bytes(
    shapes: Sequence[tuple[int, ...]], outer: OuterConfig, *, side: str = "mean"
) -> float:
    """Bytes of one cluster's DiLoCoX payload for these tensors (trainer/outer/lowrank_codec.py):
    a matrix whose smaller side is at least ``min_compress_dim`` travels as its coordinates on
    the round's shared bases, rank capped at half the smaller side, block-quantised --
    two-sided: ``A`` (n×r) and ``B`` (r×m) every round; one-sided: ``n×r`` on a right basis,
    ``m×r`` on a left one, the side alternating between rounds (``side`` = ``"right"``,
    ``"left"`` or their ``"mean"``). Everything else is sent whole, bf16 or int8 blocks
    (``dense_bits``). Uncompressed (plain DiLoCo): fp32."""
    if not outer.compressed:
        return 4 * sum(math.prod(s) for s in shapes)
    if side not in ("right", "left", "mean"):
        raise ConfigError(f"expected side 'right', 'left' or 'mean', got {side!r}")
    if side == "mean" and not outer.two_sided:
        return (
            payload_bytes(shapes, outer, side="right") + payload_bytes(shapes, outer, side="left")
        ) / 2
    total = 0
    for shape in shapes:
        if len(shape) != 2 or min(shape) < outer.min_compress_dim:
            total += encoded_length(
                math.prod(shape), bits=outer.dense_bits, block=outer.quant_block
            )
            continue
        rank = max(1, min(outer.rank, min(shape) // 2))
        n, m = shape
        parts = (n * rank, m * rank) if outer.two_sided else ((n if side == "right" else m) * rank,)
        total += sum(
            encoded_length(numel, bits=outer.bits, block=outer.quant_block) for numel in parts
        )
    return total


# --------------------------------------------------------------------------------------------
# The plan


def plan(
    model: ModelConfig,
    *,
    placement: Placement,
    workload: Workload | None = None,
    precision: Precision | None = None,
    accelerator: Accelerator | None = None,
    outer: OuterConfig | None = None,
    link_mbit: float = 1000.0,
    inner_steps: int = 100,
    offload_outer: bool = False,
    held: Held = "paper",
) -> Plan:
    """Memory per GPU and communication per outer step (module docstring). ``held`` chooses
    what a stage is assumed to hold: ``paper`` (the module docstring's GPU setting, with
    ZeRO-style sharding over D, fused attention and headroom -- not all of which this trainer
    implements) or ``trainer`` (what trainer/runtime holds today, :data:`HELD`)."""
    if held not in ("paper", "trainer"):
        raise ConfigError(f"expected held 'paper' or 'trainer', got {held!r}")
    if held == "trainer":  # the trainer keeps the outer state on the host (nesterov.HOME)
        offload_outer = True
    workload = workload or Workload()
    precision = precision or Precision()
    accelerator = accelerator or Accelerator()
    outer = outer or OuterConfig(kind="dilocox")
    if not link_mbit > 0:
        raise ConfigError(f"expected a link bandwidth > 0 Mbit/s, got {link_mbit}")
    if inner_steps < 1:
        raise ConfigError(f"expected inner_steps >= 1, got {inner_steps}")
    stage_layout(model.num_hidden_layers, placement.stages)  # raises when S does not fit the depth
    micro_batches = workload.micro_batches or placement.stages
    shapes = [
        stage_parameter_shapes(model, stage=s, stages=placement.stages)
        for s in range(placement.stages)
    ]
    workload = replace(workload, micro_batches=micro_batches)
    memory = tuple(
        _stage_memory(
            model,
            s,
            shapes[s],
            placement,
            workload,
            precision,
            accelerator,
            outer,
            offload_outer,
            held,
        )
        for s in range(placement.stages)
    )
    # Only the outer algorithm's tensors travel: a tied copy on the last stage is not exchanged.
    tied = model.tie_word_embeddings
    exchanged = [s for stage in shapes for name, s in stage if name != TIED_HEAD or not tied]
    payload = payload_bytes(exchanged, outer)
    parameters = model.parameter_count()
    tokens = (
        workload.micro_batch_size
        * workload.sequence_length
        * micro_batches
        * placement.data_parallel
    )
    flops_per_token = (8 if workload.recompute else 6) * parameters
    compute = (
        flops_per_token
        * tokens
        / (placement.gpus_per_cluster * accelerator.peak_tflops * 1e12 * accelerator.mfu)
    )
    link_bytes_per_second = link_mbit * 1e6 / 8
    allreduce = allreduce_bytes_per_outer_step(
        parameters=parameters, n_clusters=placement.clusters, inner_steps=1
    )
    gathered = allgather_bytes_per_outer_step(
        payload_bytes=math.ceil(payload), n_clusters=placement.clusters
    )
    comm = CommPlan(
        link_mbit=link_mbit,
        inner_steps=inner_steps,
        tokens_per_inner_step=tokens,
        compute_seconds_per_inner_step=compute,
        allreduce_bytes_per_inner_step=allreduce,
        allreduce_comm_seconds_per_inner_step=allreduce / link_bytes_per_second,
        dilocox_payload_bytes=payload,
        dilocox_bytes_per_outer_step=gathered,
        dilocox_comm_seconds_per_outer_step=gathered / link_bytes_per_second,
        overlapped=outer.overlapped,
    )
    return Plan(
        model=model,
        parameters=parameters,
        placement=placement,
        workload=workload,
        precision=precision,
        accelerator=accelerator,
        outer=outer,
        offload_outer=offload_outer,
        stages=memory,
        comm=comm,
        assumptions=(
            HELD[0] if held == "paper" else HELD[1],
            *_assumptions(workload, accelerator, precision, offload_outer),
        ),
        held=held,
    )


def bandwidth_for_comm_fraction(
    *, bytes_per_step: float, compute_seconds_per_step: float, fraction: float
) -> float:
    """The link (Mbit/s) on which sending ``bytes_per_step`` takes ``fraction`` of a step that
    also computes for ``compute_seconds_per_step``: comm = compute · f / (1 − f)."""
    if not 0 < fraction < 1:
        raise ConfigError(f"expected a communication fraction in (0, 1), got {fraction}")
    if not (bytes_per_step > 0 and compute_seconds_per_step > 0):
        raise ConfigError(
            "expected positive bytes and compute seconds per step, "
            f"got {bytes_per_step} and {compute_seconds_per_step}"
        )
    comm_seconds = compute_seconds_per_step * fraction / (1.0 - fraction)
    return bytes_per_step * 8 / comm_seconds / 1e6


def smallest_fitting_data_parallel(
    model: ModelConfig, *, placement: Placement, limit: int = 64, **options: Any
) -> int | None:
    """The smallest D (from the placement's, up to ``limit``) at which every stage fits, or None."""
    for d in range(placement.data_parallel, limit + 1):
        candidate = Placement(clusters=placement.clusters, stages=placement.stages, data_parallel=d)
        if plan(model, placement=candidate, **options).fits:
            return d
    return None


def fitting_alternatives(
    model: ModelConfig, *, placement: Placement, limit: int = 64, **options: Any
) -> list[str]:
    """For a plan that does not fit: the smallest D that would, at S, 2S and 4S stages, with the
    outer state on the GPU or in host memory (one line each; "none" past ``limit``)."""
    out = []
    for stages in (placement.stages, 2 * placement.stages, 4 * placement.stages):
        if stages > model.num_hidden_layers:
            break
        # The trainer always keeps the outer state on the host: with held="trainer" only that.
        for offload in (True,) if options.get("held") == "trainer" else (False, True):
            candidate = Placement(
                clusters=placement.clusters, stages=stages, data_parallel=placement.data_parallel
            )
            d = smallest_fitting_data_parallel(
                model, placement=candidate, limit=limit, **{**options, "offload_outer": offload}
            )
            where = "host memory" if offload else "the GPU"
            found = f"D >= {d} ({stages * d} GPUs per cluster)" if d else f"no D <= {limit}"
            out.append(f"S={stages}, outer state on {where}: {found}")
    return out


# --------------------------------------------------------------------------------------------


def block_activation_bytes(model: ModelConfig, *, tokens: int, bytes_per_element: int) -> float:
    """Activations one block saves for its backward pass for ``tokens`` tokens, summing the
    tensors it keeps (the method of Korthikanti et al. 2022 §4.1) with a fused attention kernel
    that stores no T×T scores: the norm inputs and outputs (4d), q, k, v (d + 2kv), the
    attention output (d) and the SwiGLU MLP's hidden tensors (gate, up, their product and the
    activation, 4f)."""
    d, f, kv = model.hidden_size, model.intermediate_size, model.kv_dim
    return tokens * bytes_per_element * (4 * d + (d + 2 * kv) + d + 4 * f)


def trainer_block_activation_bytes(
    model: ModelConfig, *, tokens: int, precision: Precision
) -> float:
    """Activations one decoder layer of trainer/model.py keeps for its backward pass, as eager
    autograd keeps them (counted tensor by tensor with ``saved_tensors_hooks``; the unit test
    holds this formula to that count): each RMSNorm its fp32 input and normalised input (4d),
    SDPA its rotated q, k and v (d + 2kv), the attention output (d) and the SwiGLU's gate,
    up, activation and product (4f); the matrix products' inputs are the norms' outputs (2d)
    at fp32, or under bf16 autocast a bf16 copy per projection (3 for q/k/v, 2 for gate/up,
    1 for o_proj: 6d)."""
    d, f, kv = model.hidden_size, model.intermediate_size, model.kv_dim
    residual = (
        8 if precision.gradients == 8 else 4
    )  # the residual stream keeps the parameters' dtype
    if precision.activations == 2:  # bf16 autocast
        per_token = 4 * d * residual + 2 * (6 * d + (d + 2 * kv) + 4 * f)
    else:
        per_token = residual * (4 * d + 2 * d + (d + 2 * kv) + d + 4 * f)
    return tokens * per_token


def _trainer_activations(
    model: ModelConfig,
    *,
    layers: int,
    in_flight: int,
    tokens: int,
    last: bool,
    recompute: bool,
    precision: Precision,
) -> tuple[float, str]:
    """Activation bytes of a stage of this trainer at its peak (1F1B, ``in_flight``
    micro-batches between forward and backward)."""
    residual = 8 if precision.gradients == 8 else 4
    block = trainer_block_activation_bytes(model, tokens=tokens, precision=precision)
    # The loss keeps fp32 log-probabilities per micro-batch in flight; its backward adds the
    # log-probabilities' and the logits' gradients (fp32) for one micro-batch, freed before the
    # layers' backward begins.
    loss_kept = in_flight * tokens * model.vocab_size * 4 if last else 0.0
    loss_backward = 2 * tokens * model.vocab_size * 4 if last else 0.0
    if recompute:
        # The one layer recomputed at a time and the loss's gradients are never alive together.
        kept = layers * in_flight * tokens * model.hidden_size * residual + max(
            block if layers else 0.0, loss_backward
        )
        note = f"{layers} layer inputs x {in_flight} micro-batches in flight + one layer recomputed"
    else:
        kept = layers * in_flight * block + loss_backward
        note = f"{layers} layers x {in_flight} micro-batches in flight"
    if last:
        kept += loss_kept
        note += " + fp32 log-probabilities and their gradients"
    return kept, note


def _stage_memory(
    model: ModelConfig,
    stage: int,
    shapes: Sequence[tuple[str, tuple[int, ...]]],
    placement: Placement,
    workload: Workload,
    precision: Precision,
    accelerator: Accelerator,
    outer: OuterConfig,
    offload_outer: bool,
    held: Held = "paper",
) -> StageMemory:
    S, D = placement.stages, placement.data_parallel
    stage_parameters = sum(math.prod(shape) for _, shape in shapes)
    # The last stage's copy of a tied embedding trains (weights, gradients, AdamW) but the outer
    # algorithm leaves it out (docs/trainer.md, "Tied embeddings across stages").
    outer_params = sum(
        math.prod(shape)
        for name, shape in shapes
        if not (name == TIED_HEAD and model.tie_word_embeddings)
    )
    layers = len(stage_layout(model.num_hidden_layers, S)[stage])
    tokens = workload.micro_batch_size * workload.sequence_length
    # 1F1B (Narayanan et al. 2021): stage s holds up to S - s micro-batches between forward and
    # backward.
    in_flight = min(S - stage, workload.micro_batches)
    full_block = block_activation_bytes(
        model, tokens=tokens, bytes_per_element=precision.activations
    )
    if workload.recompute:
        inputs = layers * in_flight * tokens * model.hidden_size * precision.activations
        kept = inputs + (full_block if layers else 0.0)
        activation_note = (
            f"{layers} block inputs x {in_flight} micro-batches in flight + one block recomputed"
        )
    else:
        kept = layers * in_flight * full_block
        activation_note = f"{layers} blocks x {in_flight} micro-batches in flight, no recomputation"
    if stage == S - 1:
        kept += tokens * model.vocab_size * 4  # fp32 logits for the loss
        activation_note += " + fp32 logits"
    # The trainer holds every tensor whole on each replica (no ZeRO sharding), the outer state on
    # the host.
    shards = D if held == "paper" else 1
    if held == "trainer":
        kept, activation_note = _trainer_activations(
            model,
            layers=layers,
            in_flight=in_flight,
            tokens=tokens,
            last=stage == S - 1,
            recompute=workload.recompute,
            precision=precision,
        )
    where = "host memory" if offload_outer else f"sharded over D={shards}"
    outer_bytes = 0.0 if offload_outer else outer_params * precision.outer / shards
    count = stage_parameters
    items = [
        MemoryItem(
            name="weights",
            bytes=count * precision.weights,
            note=f"{count:,} parameters, {precision.weights} B each",
        ),
        MemoryItem(
            name="gradients",
            bytes=count * precision.gradients,
            note=f"{precision.gradients} B each",
        ),
        MemoryItem(
            name="inner AdamW state",
            bytes=count * precision.inner_optimizer / shards,
            note=f"{precision.inner_optimizer} B: master + moments, sharded over D={shards}",
        ),
        MemoryItem(name="outer global copy", bytes=outer_bytes, note=f"fp32 θ, {where}"),
        MemoryItem(name="outer momentum", bytes=outer_bytes, note=f"fp32 Nesterov buffer, {where}"),
    ]
    if outer.kind == "dilocox" and outer.compressed and outer.error_feedback != "none":
        items.append(
            MemoryItem(name="error feedback", bytes=outer_bytes, note=f"fp32 residual, {where}")
        )
    if outer.overlapped:
        items.append(
            MemoryItem(
                name="one-step-delay references",
                bytes=2 * outer_bytes,
                note=f"fp32 look-ahead + contributed reference, {where}",
            )
        )
    headroom = accelerator.headroom_gb * GB if held == "paper" else 0.0
    items += [
        MemoryItem(name="activations", bytes=kept, note=activation_note),
        MemoryItem(
            name="headroom", bytes=headroom, note="CUDA context, NCCL buffers, fragmentation"
        ),
    ]
    return StageMemory(
        stage=stage,
        parameters=stage_parameters,
        items=tuple(items),
        capacity_bytes=accelerator.memory_gb * GB,
    )


def _assumptions(
    workload: Workload, accelerator: Accelerator, precision: Precision, offload_outer: bool
) -> tuple[str, ...]:
    return (
        f"micro-batch {workload.micro_batch_size} x {workload.sequence_length} "
        f"tokens, {workload.micro_batches} micro-batches "
        f"per replica per inner step, 1F1B schedule",
        "full activation recomputation" if workload.recompute else "no activation recomputation",
        f"mixed precision: {precision.weights} B weights, {precision.gradients} B gradients, "
        f"{precision.inner_optimizer} B AdamW state, fp32 outer state",
        f"{accelerator.name}: {accelerator.peak_tflops:g} "
        f"TFLOP/s peak at {accelerator.mfu:.0%} MFU, "
        f"{accelerator.headroom_gb:g} GB headroom",
        "outer state in host memory" if offload_outer else "outer state on the GPU",
        "AllReduce baseline: fp32 gradients ring-all-reduced "
        "over the link every inner step, not overlapped",
    )
