"""Drives one process's outer algorithm through the call order of trainer/outer/protocol.py,
with the round's membership from torchft (membership.py).

Blocking (DiLoCo)::

    contribution(t) -> commit (keep, sign, post header) -> quorum(t) -> all-gather -> apply(t)

One-step delay (DiLoCoX §3.3)::

    contribution(t) -> commit -> wait gather(t-1) -> quorum(t) -> launch gather(t) -> apply(t-1)
    ... round t+1 computes while gather(t) is on the wire ...
    at the run's last step: also wait for gather(t) and apply(t)

The short overlap (``OuterConfig.apply_delay`` = τ) keeps the one-step delay's order but applies
round t's exchange τ inner steps into round t+1 (``apply_pending``, called by the inner round),
so step t+1 finds nothing due when it contributes::

    contribution(t) -> commit -> quorum(t) -> launch gather(t)
    ... τ inner steps of round t+1 ... wait gather(t) -> apply(t) ... the rest of round t+1 ...

Round t-1's gather is waited for *before* round t's quorum: torchft rebuilds the process group
when the members change, which would cut an exchange still on the old one (after a whole round
of compute it has long arrived; the wait is counted as exposed time).

A quorum whose round is later than this cluster's means it fell behind (it restarted, or was
dropped and came back): it takes part as a listener and the caller catches up from the
recorded state (joining.py). After every ``apply`` the caller's ``after_apply`` hook runs (the
tied embedding's copy is re-synced there, local_stage.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from trainer.errors import CheckpointError
from trainer.outer.algorithm import OuterLoop
from trainer.outer.owner_reduce import OwnerWire, WholePayloads, apply_owned
from trainer.outer.protocol import (
    Contribution,
    Gathered,
    OuterAlgorithm,
    OuterUpdate,
    RoundSignals,
)
from trainer.runtime.exchange import (
    ClusterNumbers,
    ContributionHeader,
    PayloadFetch,
    PendingExchange,
    completed_exchange,
    mean_train_loss,
)
from trainer.runtime.membership import ExchangeTerms, RoundQuorum
from trainer.runtime.owner_exchange import Exchange, PendingOwnerReduce


class Membership(Protocol):
    """What the outer loop needs of membership: torchft's (membership.py) or a lone cluster's."""

    def quorum(self, round: int) -> RoundQuorum: ...

    def exchange(
        self, quorum: RoundQuorum, payload: torch.Tensor | None, terms: ExchangeTerms
    ) -> Exchange: ...


@dataclass
class StepExchange:
    """What one outer step did on the wire for this process."""

    contribution: Contribution
    quorum: RoundQuorum | None = None
    """The round's quorum (None: nothing was exchanged, one cluster re-executing alone)."""
    updates: list[OuterUpdate] = field(default_factory=list)
    comm_seconds: float = 0.0
    """Launch to completion of every exchange applied in this step."""
    exposed_seconds: float = 0.0
    """Time blocked waiting for them."""
    quorum_seconds: float = 0.0
    """Time waiting for the round's quorum (the slowest member's arrival, or a silent one's
    heartbeat timeout)."""
    listened: Exchange | None = None
    """Set when the quorum was for a later round: the exchange this cluster listened to."""


Commit = Callable[[int, Contribution, ClusterNumbers], ContributionHeader]
"""Keeps and signs a contribution and posts its header (with the cluster's numbers)."""


class OuterSync:
    def __init__(
        self,
        outer: OuterAlgorithm,
        local: Sequence[torch.Tensor],
        *,
        membership: Membership,
        commit: Commit,
        fetch: PayloadFetch | None,
        last_step: int,
        after_apply: Callable[[], None],
    ) -> None:
        self.outer = outer
        self.local = local
        self.membership = membership
        self.commit = commit
        self.fetch = fetch
        self.last_step = last_step
        self.after_apply = after_apply
        self.pending: Exchange | None = None
        """Under the delay: the exchange launched in the previous step, not applied yet."""
        self._applied_early: list[tuple[Exchange, OuterUpdate]] = []
        """Applied by ``apply_pending`` during this step's inner steps, not reported yet."""

    def step(self, step: int, numbers: ClusterNumbers, *, exchange: bool = True) -> StepExchange:
        """Contribute round ``step`` and (unless ``exchange`` is False: one cluster re-executing
        alone) exchange and apply what the call order says is due now."""
        result = StepExchange(contribution=self.outer.contribution(step, self.local))
        for early, update in self._applied_early:
            _report(result, early, update)
        self._applied_early = []
        self.commit(step, result.contribution, numbers)
        if not exchange:
            return result
        due = [self.pending] if self.outer.overlapped and self.pending is not None else []
        if self.owner_reduce:
            # Its later phases are collectives between the outer loop's computations: apply it
            # whole before the quorum, which may rebuild the group it runs on (the result does
            # not depend on when: round t is already contributed).
            for pending in due:
                self._apply_into(result, pending)
            due = []
        for pending in due:
            pending.wait()  # before the quorum: a new quorum may rebuild the group it runs on
        asked = time.perf_counter()
        quorum = self.membership.quorum(step)
        result.quorum_seconds = time.perf_counter() - asked
        result.quorum = quorum
        if quorum.round != step:
            result.listened = self.listen(quorum)
            return result
        signals = RoundSignals(mean_train_loss=mean_train_loss(quorum.headers))
        launched = self.membership.exchange(
            quorum, result.contribution.payload, self._terms(signals)
        )
        if self.outer.overlapped:
            self.pending = launched
            # Nothing computes after the last round, and the warm-up rounds (``sync_rounds``) are
            # applied before the next one computes: finish those now.
            if step == self.last_step or self._warm_up(step):
                due.append(launched)
                self.pending = None
        else:
            due = [launched]
        for pending in due:
            self._apply_into(result, pending)
        return result

    @property
    def apply_delay(self) -> int | None:
        """τ of the short overlap when round t's exchange is still to be applied in round t+1
        (``OuterConfig.apply_delay``); None otherwise."""
        if self.pending is None or not isinstance(self.outer, OuterLoop):
            return None
        return self.outer.config.delay_in_use

    def apply_pending(self) -> None:
        """Wait for the exchange in flight and apply it now (the short overlap, mid-round); the
        step's ``step`` reports it with what the step itself applies."""
        assert self.pending is not None  # apply_delay says so
        pending, self.pending = self.pending, None
        self._applied_early.append((pending, self._apply(pending)))

    def _apply_into(self, result: StepExchange, pending: Exchange) -> None:
        _report(result, pending, self._apply(pending))

    def listen(self, quorum: RoundQuorum) -> Exchange:
        """Take part in ``quorum``'s exchange without contributing (this cluster is behind)."""
        signals = (
            RoundSignals(mean_train_loss=mean_train_loss(quorum.headers))
            if quorum.headers
            else _NO_SIGNALS
        )
        listened = self.membership.exchange(quorum, None, self._terms(signals))
        listened.wait()
        return listened

    def restore(
        self,
        round: int,
        mean_train_loss: float,
        digests: dict[int, str],
        payloads: dict[int, torch.Tensor],
    ) -> None:
        """Resume with round ``round`` still to apply: its payloads come from the saved state
        (``payloads``, by cluster) or are fetched by their ``digests``."""
        own = getattr(
            self.outer, "pending_contribution", None
        )  # trainer/outer's algorithms have it
        contribution: Contribution | None = own() if callable(own) else None
        if contribution is None:
            raise CheckpointError(
                f"expected the pending payload of round {round} in the outer state, it is missing"
            )
        self.pending = completed_exchange(
            round=round,
            signals=RoundSignals(mean_train_loss=mean_train_loss),
            digests=digests,
            length=int(contribution.payload.numel()),
            payloads=payloads,
            fetch=self.fetch,
        )

    def _terms(self, signals: RoundSignals) -> ExchangeTerms:
        return ExchangeTerms(signals=signals, fetch=self.fetch, owner_reduce=self.owner_reduce)

    def _warm_up(self, round: int) -> bool:
        """True for a warm-up round of an overlapped run (``OuterConfig.sync_rounds``)."""
        return isinstance(self.outer, OuterLoop) and self.outer.config.synchronous(round)

    @property
    def owner_reduce(self) -> bool:
        """True when the run combines its payloads by owners (trainer/outer/owner_reduce.py)."""
        return isinstance(self.outer, OuterLoop) and self.outer.config.owner_reduce

    def _apply(self, exchange: Exchange) -> OuterUpdate:
        if self.owner_reduce:
            assert isinstance(self.outer, OuterLoop)  # owner_reduce says so
            wire: OwnerWire
            if isinstance(exchange, PendingOwnerReduce):
                wire = exchange
            else:  # every payload at hand: a lone or resumed cluster
                wire = WholePayloads(exchange.wait(), cluster=self.outer.cluster)
            with torch.no_grad():
                update = apply_owned(self.outer, exchange.round, wire, self.local, exchange.signals)
            if isinstance(exchange, PendingOwnerReduce):
                exchange.finish()
            self.after_apply()
            return update
        assert isinstance(exchange, PendingExchange)  # the all-gather's
        payloads = exchange.wait()
        clusters = sorted(payloads)
        with torch.no_grad():
            gathered = Gathered([payloads[c] for c in clusters], clusters)
            update = self.outer.apply(exchange.round, gathered, self.local, exchange.signals)
        self.after_apply()
        return update


def _report(result: StepExchange, exchange: Exchange, update: OuterUpdate) -> None:
    """Count an applied exchange in the step's ``result``."""
    result.updates.append(update)
    result.comm_seconds += exchange.total_seconds
    result.exposed_seconds += exchange.exposed_seconds


_NO_SIGNALS = RoundSignals(mean_train_loss=float("nan"))
"""A quorum nobody contributed to has no signals (and nothing to apply)."""
