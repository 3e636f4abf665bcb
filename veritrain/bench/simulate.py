"""Single-process simulation of C clusters (one pipeline stage each) for convergence research.

Three methods on the same model, data order and token budget, all with the trainer's own inner
loop: ``trainer.config.InnerConfig`` and the schedule, AdamW and clipping rule of
trainer/runtime/inner.py (so what the sweeps measure is the inner loop ``veritrain train`` runs;
only the pipeline split and the processes are simulated away):

* ``allreduce``: one model; every inner step averages the gradients of the C clusters' batches
  (one step on the union of their batches) -- synchronous data parallelism.
* ``diloco`` / ``dilocox``: C models, each with its own inner AdamW, and one ``OuterAlgorithm``
  per cluster built by ``build_outer_algorithm`` -- exactly the objects the distributed runtime
  uses; the all-gather is a list in cluster order, and the overlapped call order of protocol.py
  is followed to the letter (round t's payloads are applied after round t+1 computed, or with
  the short overlap, ``OuterConfig.apply_delay``, after its first ``min(τ, H − 1)`` steps).

The whole model runs as one stage (``trainer.model.CausalLM``), so a tied embedding is one matrix
and the gradient norm is the model's; the trainer's pipeline computes the same quantities over
its stages, up to floating-point summation order.

Data come from a ``batches(cluster, step) -> (inputs, targets)`` callable; evaluation is the
mean loss of the global parameters on fixed held-out batches. Bytes are counted with
accounting.py. Deterministic on CPU: fixed seeds, deterministic algorithms, one thread is
recommended (``torch.set_num_threads(1)``), rank-ordered sums inside the outer algorithm.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

from trainer.config import InnerConfig
from trainer.errors import ConfigError
from trainer.model import CausalLM, ModelConfig, language_model_loss
from trainer.outer import Gathered, OuterConfig, OuterLoop, RoundSignals, build_outer_algorithm
from trainer.outer.accounting import allgather_bytes_per_outer_step, allreduce_bytes_per_outer_step
from trainer.runtime.determinism import CUBLAS_DETERMINISTIC_WORKSPACE
from trainer.runtime.inner import clip_to_norm, inner_adamw, learning_rate, square_sum

Method = Literal["allreduce", "diloco", "dilocox"]
Batch = tuple[torch.Tensor, torch.Tensor]
Batches = Callable[[int, int], Batch]
"""``batches(cluster, step)``: the (inputs, targets) cluster ``cluster`` trains on at inner step
``step``, each ``(batch, context)`` int64."""


@dataclass(frozen=True, kw_only=True)
class SimulationConfig:
    """One simulated training run."""

    model: ModelConfig
    """Shape of the decoder (every cluster starts from the same initialisation)."""
    method: Method
    """``allreduce``, ``diloco`` or ``dilocox``."""
    outer: OuterConfig = field(default_factory=OuterConfig)
    """Outer algorithm (ignored by ``allreduce``; its ``kind`` must match ``method``)."""
    n_clusters: int = 2
    """Simulated clusters C."""
    inner_steps: int = 25
    """Inner steps per outer round H."""
    total_steps: int = 1500
    """Inner steps per cluster for the whole run (a multiple of ``inner_steps``); the inner
    learning rate's cosine reaches its floor here, as the trainer's does at T·H."""
    inner: InnerConfig = field(default_factory=InnerConfig)
    """The inner optimiser, exactly as ``TrainConfig.inner`` configures the trainer's."""
    round_steps: tuple[int, ...] = ()
    """H of each round, for rounds of unequal length (research: the trainer's H is one number or
    adaptive); they must add up to ``total_steps``. Empty: ``inner_steps`` every round."""
    seed: int = 0
    """Model initialisation (``CausalLM(..., seed=seed)``, as the trainer's ``build_stage``), data
    order and basis seed."""
    eval_points: int = 10
    """Held-out evaluations spread over the run (the last is always at the end)."""
    device: str = "cpu"
    """Where the models train (``cpu`` or ``cuda``): a GPU only makes a larger preset's study
    affordable; runs are repeatable on one device, not equal across devices."""

    def __post_init__(self) -> None:
        if self.method not in ("allreduce", "diloco", "dilocox"):
            raise ConfigError(
                f"SimulationConfig.method must be allreduce|diloco|dilocox, got {self.method!r}"
            )
        if self.method != "allreduce" and self.outer.kind != self.method:
            raise ConfigError(
                f"SimulationConfig.outer.kind must match method {self.method!r}, "
                f"got {self.outer.kind!r}"
            )
        if self.n_clusters < 1 or self.inner_steps < 1:
            raise ConfigError("SimulationConfig.n_clusters and inner_steps must be >= 1")
        if self.round_steps:
            if min(self.round_steps) < 1 or sum(self.round_steps) != self.total_steps:
                raise ConfigError(
                    "SimulationConfig.round_steps must be inner step counts >= 1 adding up to "
                    f"total_steps ({self.total_steps}), got {list(self.round_steps)}"
                )
        elif self.total_steps % self.inner_steps:
            raise ConfigError(
                f"SimulationConfig.total_steps ({self.total_steps}) must be a multiple of "
                f"inner_steps ({self.inner_steps})"
            )

    def rounds(self) -> tuple[int, ...]:
        """H of every round of the run."""
        if self.round_steps:
            return self.round_steps
        return (self.inner_steps,) * (self.total_steps // self.inner_steps)


@dataclass(kw_only=True)
class SimulationResult:
    """What one run measured."""

    final_eval_loss: float
    curve: list[tuple[int, float]]
    """(inner step, held-out loss of the global parameters)."""
    bytes_per_cluster: float
    """Bytes one cluster put on inter-cluster links over the whole run (accounting.py)."""
    allreduce_bytes_per_cluster: float
    """What the AllReduce baseline would have sent for the same steps."""
    parameters: int
    ranks: list[int] = field(default_factory=list)
    payload_bytes: list[int] = field(default_factory=list)
    anomalies: int = 0
    seconds: float = 0.0
    diverged: bool = False


def simulate(
    config: SimulationConfig,
    *,
    batches: Batches,
    eval_batches: Sequence[Batch],
    progress: Callable[[str], None] | None = None,
) -> SimulationResult:
    """Run one simulated training job and measure held-out loss and bytes sent."""
    device = torch.device(config.device)
    if device.type == "cuda":  # cuBLAS refuses deterministic GEMMs without a fixed workspace
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    reference = CausalLM(config.model, seed=config.seed).to(device)
    parameters = sum(p.numel() for p in reference.parameters())
    replicas = 1 if config.method == "allreduce" else config.n_clusters
    models = [clone_model(reference, device) for _ in range(replicas)]
    eval_on_device = [(x.to(device), y.to(device)) for x, y in eval_batches]
    optimizers = [inner_adamw(m.parameters(), config.inner) for m in models]
    schedule = config.rounds()
    rounds = len(schedule)
    eval_rounds = {
        max(1, round(rounds * (k + 1) / config.eval_points)) - 1 for k in range(config.eval_points)
    }
    allreduce_bytes = sum(
        allreduce_bytes_per_outer_step(
            parameters=parameters, n_clusters=config.n_clusters, inner_steps=H
        )
        for H in schedule
    )
    result = SimulationResult(
        final_eval_loss=math.nan,
        curve=[],
        bytes_per_cluster=0.0,
        allreduce_bytes_per_cluster=allreduce_bytes,
        parameters=parameters,
    )
    algos = cluster_loops(config, models) if config.method != "allreduce" else []
    in_flight: list[torch.Tensor] | None = None
    in_flight_signals = RoundSignals(mean_train_loss=math.nan)
    delay = config.outer.delay_in_use if algos else None
    step = 0
    for t, H in enumerate(schedule):
        losses = []
        for k in range(H):
            if delay is not None and in_flight is not None and k == min(delay, H - 1):
                # The short overlap: round t−1 lands k inner steps into round t.
                locals_ = [[p.data for p in m.parameters()] for m in models]
                _apply_all(algos, t - 1, in_flight, locals_, in_flight_signals, result)
                in_flight = None
            lr = learning_rate(config.inner, step, config.total_steps)
            if config.method == "allreduce":
                union = [_to(batches(c, step), device) for c in range(config.n_clusters)]
                inputs = torch.cat([b[0] for b in union])
                targets = torch.cat([b[1] for b in union])
                losses.append(
                    inner_step(models[0], optimizers[0], (inputs, targets), lr, config.inner)
                )
            else:
                for c, (model, opt) in enumerate(zip(models, optimizers, strict=True)):
                    batch = _to(batches(c, step), device)
                    losses.append(inner_step(model, opt, batch, lr, config.inner))
            step += 1
        mean_loss = sum(losses) / len(losses)
        if not math.isfinite(mean_loss):
            result.diverged = True
            break
        if algos:
            signals = RoundSignals(mean_train_loss=mean_loss)
            locals_ = [[p.data for p in m.parameters()] for m in models]
            payloads = [
                a.contribution(t, loc).payload for a, loc in zip(algos, locals_, strict=True)
            ]
            result.bytes_per_cluster += allgather_bytes_per_outer_step(
                payload_bytes=payloads[0].numel(), n_clusters=config.n_clusters
            )
            if not config.outer.synchronous(t):
                if in_flight is not None:
                    _apply_all(algos, t - 1, in_flight, locals_, signals, result)
                in_flight, in_flight_signals = payloads, signals
                if t == rounds - 1:
                    _apply_all(algos, t, in_flight, locals_, signals, result)
            else:
                _apply_all(algos, t, payloads, locals_, signals, result)
        else:
            result.bytes_per_cluster += allreduce_bytes_per_outer_step(
                parameters=parameters, n_clusters=config.n_clusters, inner_steps=H
            )
        if t in eval_rounds:
            weights = (
                algos[0].global_parameters() if algos else [p.data for p in models[0].parameters()]
            )
            loss = evaluate(config.model, weights, eval_on_device, device=device)
            result.curve.append((step, loss))
            if progress:
                progress(f"step {step:5d}  train {mean_loss:.4f}  eval {loss:.4f}")
            if not math.isfinite(loss):
                result.diverged = True
                break
    result.final_eval_loss = result.curve[-1][1] if result.curve else math.nan
    result.diverged = result.diverged or not math.isfinite(result.final_eval_loss)
    result.seconds = time.perf_counter() - started
    return result


def evaluate(
    model_config: ModelConfig,
    weights: Sequence[torch.Tensor],
    eval_batches: Sequence[Batch],
    *,
    device: torch.device | None = None,
) -> float:
    """Mean held-out loss of a model holding ``weights`` (in ``parameters()`` order), computed
    on ``device`` (default: the CPU), where ``eval_batches`` must be."""
    model = CausalLM(model_config).to(device or torch.device("cpu"))
    with torch.no_grad():
        for p, w in zip(model.parameters(), weights, strict=True):
            p.copy_(w)
        losses = [float(language_model_loss(model(x), y)) for x, y in eval_batches]
    return sum(losses) / len(losses)


def _apply_all(
    algos: Sequence[OuterLoop],
    round: int,
    gathered: Sequence[torch.Tensor],
    locals_: Sequence[Sequence[torch.Tensor]],
    signals: RoundSignals,
    result: SimulationResult,
) -> None:
    updates = [
        a.apply(round, Gathered(gathered), loc, signals)
        for a, loc in zip(algos, locals_, strict=True)
    ]
    result.ranks.append(updates[0].rank)
    result.payload_bytes.append(updates[0].payload_bytes)
    result.anomalies += len(updates[0].anomalies)


def cluster_loops(config: SimulationConfig, models: Sequence[CausalLM]) -> list[OuterLoop]:
    """One ``OuterLoop`` per cluster's model, as the runtime builds them (the same run seed, so
    every cluster draws the same bases)."""
    loops = []
    for cluster, model in enumerate(models):
        loop = build_outer_algorithm(
            config.outer,
            named_params=list(model.named_parameters()),
            cluster=cluster,
            n_clusters=config.n_clusters,
            seed=config.seed,
        )
        assert isinstance(loop, OuterLoop)
        loops.append(loop)
    return loops


def clone_model(reference: CausalLM, device: torch.device) -> CausalLM:
    """A copy of ``reference`` (same weights) on ``device``: every cluster starts from it."""
    model = CausalLM(reference.config).to(device)
    model.load_state_dict(reference.state_dict())
    return model


def _to(batch: Batch, device: torch.device) -> Batch:
    inputs, targets = batch
    return inputs.to(device), targets.to(device)


def inner_step(
    model: CausalLM, optimizer: torch.optim.Optimizer, batch: Batch, lr: float, config: InnerConfig
) -> float:
    """One inner step as trainer/runtime/inner.py takes it: clip the global gradient norm,
    set the scheduled learning rate, step AdamW."""
    inputs, targets = batch
    loss = language_model_loss(model(inputs), targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # type: ignore[no-untyped-call]
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    # Summed where the gradients are and read back: on the CPU the additions of sum_of_squares.
    norm = math.sqrt(float(square_sum(grads, inputs.device)))
    clip_to_norm(grads, norm, config.grad_clip)
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    return float(loss.detach())
