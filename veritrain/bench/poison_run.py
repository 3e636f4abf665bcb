"""One simulated run of ``veritrain bench poison``: C clusters in one process, one of them
attacking, judged by the trainer's own verdict code.

What is the trainer's and what is simulated:

* the model (``CausalLM`` of the preset: one stage holding the whole model), the data (the
  preset's corpus, built by trainer/data, read with the run's assignment rule), the inner step
  (``inner_adamw``, ``learning_rate``, ``clip_to_norm`` of trainer/runtime/inner.py) and the
  outer algorithm (``build_outer_algorithm``: pseudo-gradients, codec, verdicts, contribution
  scores through ``FullModelJudge``) are the trainer's;
* the processes and the all-gather are simulated: clusters run one after the other and the
  gather is a list in cluster order, as in veritrain/bench/simulate.py. One judge is shared by the
  honest clusters (they judge the same payloads, so the trainer's clusters compute the same
  verdict C times; here it is computed once).

The attacker trains like the others (or lazily) and sends what its attack makes of its
pseudo-gradient. Every round the attacker's contribution is also re-executed, as ``veritrain
audit`` re-executes a drawn (outer step, cluster) pair: its H inner steps taken again honestly,
on its assigned windows, from its state at the round's start; the pair is caught when the
re-executed local parameters or the payload they give differ from what it trained and sent
(``RunOutcome.reexecuted``).

The attacker does not apply exchanges itself: after every round it adopts the honest
clusters' state (a real attacker could do as it likes; this one keeps training from the
global model so its attack stays of the same kind all run long).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

from records.outer_step import ClusterVerdict
from trainer.config import TrainConfig
from trainer.data.reader import Batch, BatchReader
from trainer.model import CausalLM, language_model_loss
from trainer.outer import (
    FullModelJudge,
    Gathered,
    OuterLoop,
    RoundSignals,
    build_outer_algorithm,
    payload_digest,
)
from trainer.outer.contribution_score import mean_loss
from trainer.runtime.inner import clip_to_norm, inner_adamw, learning_rate, sum_of_squares
from trainer.runtime.poison import Attack, attacked

Scenario = Literal[
    "scale", "noise", "sign_flip", "replay", "free_rider", "lazy_other_data", "lazy_quarter_steps"
]
SCENARIOS: tuple[Scenario, ...] = (
    "scale",
    "noise",
    "sign_flip",
    "replay",
    "free_rider",
    "lazy_other_data",
    "lazy_quarter_steps",
)
SENT: dict[Scenario, Attack] = {
    "scale": "scale",
    "noise": "noise",
    "sign_flip": "sign",
    "replay": "replay",
    "free_rider": "zero",
}
"""Scenarios that change what is sent (the lazy ones change how the attacker trains)."""
FACTOR: dict[Scenario, float] = {"scale": 100.0, "noise": 1.0}
REPLAY_LAG = 2
"""The replay attack sends its pseudo-gradient of two rounds before."""
OTHER_DATA_OFFSET = 1_000_003
"""The lazy attacker trains on the windows of a far-away inner step instead of its own."""


@dataclass(frozen=True, kw_only=True)
class PoisonRun:
    """One simulated run."""

    config: TrainConfig
    """The preset's configuration with the bench's clusters, stages = 1, T and H."""
    scenario: Scenario | None
    """None: a clean run."""
    attacker: int = 1
    first_attacked_round: int = 2
    """Rounds before it are honest (replay needs earlier rounds)."""


@dataclass(kw_only=True)
class RunOutcome:
    verdicts: list[list[ClusterVerdict]] = field(default_factory=list)
    """Per round, every cluster's verdict (as the honest clusters reached it)."""
    final_eval_loss: float = math.nan
    seconds: float = 0.0
    reexecuted: list[bool] = field(default_factory=list)
    """Per round: whether re-executing the attacker's contribution caught it (empty: a clean
    run, nothing re-executed)."""


def simulate(
    run: PoisonRun, reader: BatchReader, say: Callable[[str], None] | None = None
) -> RunOutcome:
    """Train ``run`` and collect every round's verdicts and the final held-out loss."""
    config = run.config
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(config.seed)
    C, T = config.clusters, config.outer_steps
    rounds = config.round_inner_steps()  # H of each round: the trainer's plan
    reference = CausalLM(config.model, seed=config.seed)
    models = [_clone(reference) for _ in range(C)]
    optimizers = [inner_adamw(m.parameters(), config.inner) for m in models]
    judge = FullModelJudge(
        config.model,
        batches=reader,
        micro_batches=config.micro_batches,
        probe_batches=config.outer.anomaly_probe_batches,
        own_batches=config.outer.anomaly_own_batches,
    )
    loops: list[OuterLoop] = []
    for c, model in enumerate(models):
        loop = build_outer_algorithm(
            config.outer,
            named_params=[(n, p.detach()) for n, p in model.named_parameters()],
            cluster=c,
            n_clusters=C,
            seed=config.seed,
            judge=judge,
        )
        assert isinstance(loop, OuterLoop) and not loop.overlapped  # the bench runs blocking DiLoCo
        loops.append(loop)
    honest = [c for c in range(C) if run.scenario is None or c != run.attacker]
    history: list[list[torch.Tensor]] = []  # the attacker's pseudo-gradients, by round
    outcome = RunOutcome()
    for t in range(T):
        first, H = sum(rounds[:t]), rounds[t]
        attacking = run.scenario is not None and t >= run.first_attacked_round
        losses = []
        honest_again: list[torch.Tensor] | None = None
        if run.scenario is not None:
            # The auditor's re-execution: the attacker's H inner steps taken honestly from a
            # copy of its state at the round's start (the training RNG is saved and put back,
            # so the run itself goes on unchanged).
            again, again_optimizer = _copy_of(
                config, models[run.attacker], optimizers[run.attacker]
            )
            with torch.random.fork_rng(devices=[]):
                _train_round(
                    config, again, again_optimizer, reader, run.attacker, first, H, lazy=None
                )
            honest_again = [p.data for p in again.parameters()]
        for c, (model, optimizer) in enumerate(zip(models, optimizers, strict=True)):
            lazy = run.scenario if attacking and c == run.attacker else None
            losses += _train_round(config, model, optimizer, reader, c, first, H, lazy=lazy)
        signals = RoundSignals(mean_train_loss=sum(losses) / len(losses))
        locals_ = [[p.data for p in m.parameters()] for m in models]
        for loop in loops:
            loop.note_round_data(t, first_inner_step=first, inner_steps=H)
        gathered = [
            loop.contribution(t, local).payload for loop, local in zip(loops, locals_, strict=True)
        ]
        if run.scenario is not None:
            a = run.attacker
            trained_payload = gathered[a]
            delta = loops[a].codec.expand(t, loops[a].codec.coordinates(t, gathered[a]))
            history.append(delta)
            if attacking and run.scenario in SENT:
                sent = attacked(
                    SENT[run.scenario],
                    delta,
                    factor=FACTOR.get(run.scenario, 1.0),
                    generator=torch.Generator().manual_seed(config.seed * 7919 + t),
                    earlier=history[t - REPLAY_LAG] if t >= REPLAY_LAG else None,
                )
                gathered[a] = loops[a].codec.encode(t, sent)
        if honest_again is not None:
            same_training = all(
                torch.equal(x, y) for x, y in zip(honest_again, locals_[run.attacker], strict=True)
            )
            same_payload = payload_digest(gathered[run.attacker]) == payload_digest(trained_payload)
            outcome.reexecuted.append(not (same_training and same_payload))
        updates = [loops[c].apply(t, Gathered(gathered), locals_[c], signals) for c in honest]
        outcome.verdicts.append(list(updates[0].verdicts))
        if run.scenario is not None:  # the attacker adopts the honest clusters' state
            loops[run.attacker].load_state_dict(loops[honest[0]].state_dict())
            with torch.no_grad():
                for mine, theirs in zip(locals_[run.attacker], locals_[honest[0]], strict=True):
                    mine.copy_(theirs)
        if say is not None:
            flagged = [f"{v.cluster}:{'+'.join(v.flags)}" for v in updates[0].verdicts if v.flags]
            shown = ", ".join(flagged) or "-"
            say(f"  round {t}: train {signals.mean_train_loss:.4f}  flagged {shown}")
    outcome.final_eval_loss = _eval_loss(config, loops[honest[0]], reader)
    return outcome


def _train_round(
    config: TrainConfig,
    model: CausalLM,
    optimizer: torch.optim.Optimizer,
    reader: BatchReader,
    cluster: int,
    first: int,
    H: int,
    *,
    lazy: Scenario | None,
) -> list[float]:
    """H inner steps from global inner step ``first``, as trainer/runtime/inner.py takes them
    (one stage: the gradient norm is the model's). ``lazy_quarter_steps`` takes the first H/4;
    ``lazy_other_data`` reads other windows."""
    steps = range(first, first + (max(1, H // 4) if lazy == "lazy_quarter_steps" else H))
    losses = []
    for i in steps:
        read_at = i + OTHER_DATA_OFFSET if lazy == "lazy_other_data" else i
        losses.append(
            _inner_step(config, model, optimizer, reader.train_batch(cluster, read_at), i)
        )
    return losses


def _copy_of(
    config: TrainConfig, model: CausalLM, optimizer: torch.optim.Optimizer
) -> tuple[CausalLM, torch.optim.Optimizer]:
    """A copy of a cluster's model and inner optimizer that trains without touching them."""
    again = _clone(model)
    again_optimizer = inner_adamw(again.parameters(), config.inner)
    again_optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    return again, again_optimizer


def _inner_step(
    config: TrainConfig, model: CausalLM, optimizer: torch.optim.Optimizer, batch: Batch, step: int
) -> float:
    inputs, targets = batch
    loss = language_model_loss(model(inputs), targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # type: ignore[no-untyped-call]
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    clip_to_norm(grads, math.sqrt(sum_of_squares(grads)), config.inner.grad_clip)
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(config.inner, step, config.planned_inner_steps)
    optimizer.step()
    return float(loss.detach())


def _eval_loss(config: TrainConfig, loop: OuterLoop, reader: BatchReader) -> float:
    model = CausalLM(config.model)
    with torch.no_grad():
        for p, value in zip(model.parameters(), loop.global_parameters(), strict=True):
            p.copy_(value)
        return mean_loss(model, reader.eval_batches(config.eval_batches), config.micro_batches)


def _clone(reference: CausalLM) -> CausalLM:
    model = CausalLM(reference.config)
    model.load_state_dict(reference.state_dict())
    return model


def attacked_rounds(run: PoisonRun) -> Sequence[int]:
    return (
        range(run.first_attacked_round, run.config.outer_steps) if run.scenario is not None else ()
    )
