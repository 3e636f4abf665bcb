"""Drives one process's outer algorithm through the call order of trainer/outer/protocol.py.

Blocking (DiLoCo)::

    contribution(t) -> all-gather -> apply(t)

One-step delay (DiLoCoX §3.3)::

    contribution(t) -> launch all-gather(t) -> apply(t-1) with the gather launched one step ago
    ... round t+1 computes while gather(t) is on the wire ...
    at the run's last step: also wait for gather(t) and apply(t)

After every ``apply`` the caller's ``after_apply`` hook runs (the worker re-syncs the tied
embedding's copy there). A resumed run re-launches the saved step's pending gather with
:meth:`OuterSync.restart`, so it completes as it would have without the interruption.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from trainer.errors import CheckpointError
from trainer.outer.protocol import Contribution, OuterAlgorithm, OuterUpdate, RoundSignals
from trainer.runtime.exchange import PendingExchange, start_exchange


@dataclass
class StepExchange:
    """What one outer step did on the wire for this process."""

    contribution: Contribution
    updates: list[OuterUpdate] = field(default_factory=list)
    comm_seconds: float = 0.0
    """Launch to completion of every exchange applied in this step."""
    exposed_seconds: float = 0.0
    """Time blocked waiting for them."""


class OuterSync:
    def __init__(
        self,
        outer: OuterAlgorithm,
        local: Sequence[torch.Tensor],
        *,
        group: dist.ProcessGroup | None,
        device: torch.device,
        last_step: int,
        after_apply: Callable[[], None],
    ) -> None:
        self.outer = outer
        self.local = local
        self.group = group
        """The stage's outer group; None when this cluster is alone (C = 1)."""
        self.device = device
        self.last_step = last_step
        self.after_apply = after_apply
        self.pending: PendingExchange | None = None
        """Under the delay: the exchange launched in the previous step, not applied yet."""

    def step(self, step: int, signals: RoundSignals, *, exchange: bool = True) -> StepExchange:
        """Contribute round ``step`` and (unless ``exchange`` is False: one cluster re-executing
        alone) exchange and apply what the call order says is due now."""
        result = StepExchange(contribution=self.outer.contribution(step, self.local))
        if not exchange:
            return result
        launched = self._launch(result.contribution, step, signals)
        if self.outer.overlapped:
            due = [self.pending] if self.pending is not None else []
            self.pending = launched
            if step == self.last_step:  # nothing computes after the last round: finish it now
                due.append(launched)
                self.pending = None
        else:
            due = [launched]
        for pending in due:
            result.updates.append(self._apply(pending))
            result.comm_seconds += pending.total_seconds
            result.exposed_seconds += pending.exposed_seconds
        return result

    def restart(self, round: int, mean_train_loss: float) -> None:
        """Launch again the gather of the saved step's own payload (resume under the delay)."""
        pending = getattr(self.outer, "pending_contribution", None)  # trainer/outer's algorithms have it
        contribution: Contribution | None = pending() if callable(pending) else None
        if contribution is None:
            raise CheckpointError(f"expected the pending payload of round {round} in the outer state, it is missing")
        self.pending = self._launch(contribution, round, RoundSignals(mean_train_loss=mean_train_loss))

    def _launch(self, contribution: Contribution, round: int, signals: RoundSignals) -> PendingExchange:
        if self.group is None:  # a lone cluster: its own payload is everything there is to gather
            return PendingExchange(
                round=round, signals=signals, work=None, gathered=[contribution.payload], started=time.perf_counter()
            )
        return start_exchange(contribution.payload, round=round, signals=signals, group=self.group, device=self.device)

    def _apply(self, exchange: PendingExchange) -> OuterUpdate:
        gathered = exchange.wait()
        with torch.no_grad():
            update = self.outer.apply(exchange.round, gathered, self.local, exchange.signals)
        self.after_apply()
        return update
