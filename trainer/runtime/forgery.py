"""TESTS AND BENCHMARKS ONLY: one cluster departs from honest training in one outer step,
without the run's configuration saying so -- what a dishonest cluster would do, and what
``veritrain reproduce`` (and its ``--bisect``) must catch.

Unlike ``TrainConfig.poison_for_testing`` (recorded in the genesis: the anomaly checks'
test), a forgery is handed to ``trainer.api.train`` / ``reexecute_outer_step`` beside the
configuration, so the ledger records an honest-looking run. Kinds:

* ``skip_inner_step``: the cluster does not take inner step ``inner_step`` (counted from 0 in
  the outer step): no forward, backward or optimiser step, yet it commits and goes on;
* ``other_window``: at that inner step it trains on the windows the rule assigns to a global
  inner step ``WINDOW_OFFSET`` later (data it was not assigned);
* ``lr_scale``: its inner learning rate is ``factor`` times the schedule's for the whole outer
  step;
* ``contribution_scale``: its pseudo-gradient is ``factor`` times what it trained (through
  trainer/runtime/poison.py, after its last inner step);
* ``payload_scale``: the same scaling, after its per-inner-step commitments were taken -- a
  cluster that commits to an honest shadow run and sends another payload (the commitments
  then say nothing of it: reproduce must judge the payload itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainer.config import PoisonForTesting

ForgeryKind = Literal[
    "skip_inner_step", "other_window", "lr_scale", "contribution_scale", "payload_scale"
]
FORGERY_KINDS: tuple[ForgeryKind, ...] = (
    "skip_inner_step",
    "other_window",
    "lr_scale",
    "contribution_scale",
    "payload_scale",
)
WINDOW_OFFSET = 1_000_003
"""How far ahead (in global inner steps) ``other_window`` reads: beyond any run's budget."""


@dataclass(frozen=True, kw_only=True)
class Forgery:
    cluster: int
    step: int
    """The outer step in which the cluster cheats."""
    kind: ForgeryKind
    inner_step: int = 0
    """``skip_inner_step`` / ``other_window``: which inner step of the outer step (from 0)."""
    factor: float = 1.0
    """``lr_scale`` / ``contribution_scale`` / ``payload_scale``: the factor."""

    def __post_init__(self) -> None:
        if self.kind not in FORGERY_KINDS:
            raise ValueError(
                f"Forgery.kind: expected one of {', '.join(FORGERY_KINDS)}, got {self.kind!r}"
            )
        if min(self.cluster, self.step, self.inner_step) < 0:
            raise ValueError(f"Forgery: expected a cluster, step and inner step >= 0, got {self}")

    def _here(self, cluster: int, step: int) -> bool:
        return cluster == self.cluster and step == self.step

    def skips(self, cluster: int, step: int, offset: int) -> bool:
        """Whether inner step ``offset`` of ``step`` is skipped by ``cluster``."""
        return (
            self.kind == "skip_inner_step"
            and self._here(cluster, step)
            and offset == self.inner_step
        )

    def window_step(self, cluster: int, step: int, offset: int, inner_step: int) -> int:
        """The global inner step whose windows ``cluster`` reads at ``inner_step``."""
        forged = (
            self.kind == "other_window" and self._here(cluster, step) and offset == self.inner_step
        )
        return inner_step + WINDOW_OFFSET if forged else inner_step

    def lr_factor(self, cluster: int, step: int) -> float:
        return self.factor if self.kind == "lr_scale" and self._here(cluster, step) else 1.0

    @property
    def hidden_from_commitments(self) -> bool:
        """Whether the scaling comes after the commitments are taken (``payload_scale``)."""
        return self.kind == "payload_scale"

    def poison(self) -> PoisonForTesting | None:
        """The contribution scaling as the poison rule it is."""
        if self.kind not in ("contribution_scale", "payload_scale"):
            return None
        return PoisonForTesting(
            cluster=self.cluster, step=self.step, kind="scale", factor=self.factor
        )
