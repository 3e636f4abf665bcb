"""Judging one (cluster, stage)'s per-inner-step commitments against a re-execution, and
narrowing a dispute to the first inner step that disagrees (records/commitments.py).

Under ``bitwise`` every digest must be equal: the start, each inner step, the contributed
parameters. Under ``tolerance`` (veritrain/audit/distance.py, bound b):

* the start must be the recorded state exactly (the re-execution restores it from the
  recorded checkpoint on any hardware, so its fingerprints are equal);
* inner step i: ‖g_i − f_i‖ / ‖f_i − s‖ <= b, with f_i the recorded stage fingerprint, g_i the
  re-executed one and s the start's. The update is measured from the start of the outer step,
  not from the previous inner step: drift that honest hardware accumulates over i steps is
  then held against i steps of progress, while a forged inner step still stands out (skipping
  step i of H removes about 1/i of the update made so far);
* the contributed parameters, tensor by tensor: ‖g − f‖ / ‖f − s‖ <= b per tensor (across
  precisions the stage's tensors at once: veritrain/audit/modes.py).

The first inner step that breaks its rule is where the dispute lies: everything before it was
executed as recorded, so what happened in that one step (one forward, backward and optimiser
step of one stage on one batch) is all that is left to argue about.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from records.commitments import InnerCommitments
from veritrain.audit.distance import Distance, fingerprint_distance, stage_fingerprint
from veritrain.audit.modes import Granularity, Rule

START_EXACT = 1e-12
"""Relative difference (against the tensor's own norm) below which two fingerprints of the
start are the same state: both are float64 sums of the same recorded values."""


@dataclass(frozen=True)
class StageVerdict:
    cluster: int
    stage: int
    mode: Rule
    bound: float
    start_agrees: bool
    inner_distances: tuple[tuple[int, float], ...]
    """(global inner step, distance): 0 or inf under bitwise (digests equal or not)."""
    contributed: tuple[Distance, ...]
    """Per tensor under tolerance; one entry, the digest, under bitwise."""
    problems: tuple[str, ...] = field(default=())
    """Commitments that cannot be compared at all (other inner steps, other tensors)."""

    @property
    def first_disagreement(self) -> int | None:
        """The first global inner step whose commitment breaks the rule (None: all agree)."""
        return next((i for i, d in self.inner_distances if d > self.bound), None)

    @property
    def contributed_agrees(self) -> bool:
        return all(d.value <= self.bound for d in self.contributed)

    @property
    def ok(self) -> bool:
        return (
            not self.problems
            and self.start_agrees
            and self.first_disagreement is None
            and self.contributed_agrees
        )

    def describe(self) -> str:
        """One line for a person."""
        where = f"cluster {self.cluster} stage {self.stage}"
        if self.problems:
            return f"{where}: commitments not comparable: {'; '.join(self.problems)}"
        if not self.start_agrees:
            return f"{where}: did not start from the recorded state (its start commitment differs)"
        first = self.first_disagreement
        if first is not None:
            distance = dict(self.inner_distances)[first]
            return f"{where}: first disagreement after inner step {first}{self._shown(distance)}"
        worst_inner = max((d for _, d in self.inner_distances), default=0.0)
        worst = max(self.contributed, key=lambda d: d.value, default=None)
        steps = len(self.inner_distances)
        if not self.contributed_agrees and worst is not None:
            return (
                f"{where}: every inner step agrees, but the contributed {worst.name} does not"
                f"{self._shown(worst.value)}"
            )
        if self.mode == "bitwise":
            return f"{where}: {steps} inner-step digests and the contributed parameters equal"
        largest = worst.value if worst else 0.0
        return (
            f"{where}: {steps} inner steps within {self.bound} (largest {worst_inner:.3g}), "
            f"{len(self.contributed)} contributed tensors within it (largest {largest:.3g})"
        )

    def _shown(self, distance: float) -> str:
        if self.mode == "bitwise":
            return " (digests differ)"
        return f" (relative distance {distance:.3g} > {self.bound})"


def judge_stage(
    recorded: InnerCommitments,
    again: InnerCommitments,
    *,
    mode: Rule,
    bound: float,
    granularity: Granularity = "tensor",
) -> StageVerdict:
    """``recorded`` (what the cluster signed) against ``again`` (the re-execution)."""
    problems: list[str] = []
    steps = [c.inner_step for c in recorded.inner_steps]
    if steps != [c.inner_step for c in again.inner_steps]:
        problems.append(
            f"recorded inner steps {steps[:1]}..{steps[-1:]}, "
            f"re-executed {len(again.inner_steps)} others"
        )
    if sorted(recorded.start.tensors) != sorted(again.start.tensors):
        problems.append("the recorded tensors are not the re-executed stage's")
    if recorded.dims != again.dims or recorded.method != again.method:
        problems.append(f"recorded fingerprints of {recorded.dims} numbers by {recorded.method}")
    if problems:
        return StageVerdict(
            cluster=recorded.cluster,
            stage=recorded.stage,
            mode=mode,
            bound=bound,
            start_agrees=False,
            inner_distances=(),
            contributed=(),
            problems=tuple(problems),
        )
    if mode == "bitwise":
        return StageVerdict(
            cluster=recorded.cluster,
            stage=recorded.stage,
            mode=mode,
            bound=bound,
            start_agrees=recorded.start.digest == again.start.digest,
            inner_distances=tuple(
                (r.inner_step, 0.0 if r.digest == a.digest else math.inf)
                for r, a in zip(recorded.inner_steps, again.inner_steps, strict=True)
            ),
            contributed=(
                Distance(
                    "parameters",
                    0.0 if recorded.contributed.digest == again.contributed.digest else math.inf,
                ),
            ),
        )
    zeros = tuple(0.0 for _ in range(again.dims))
    start_agrees = all(
        fingerprint_distance(again.start.tensors[name], recorded.start.tensors[name], zeros)
        <= START_EXACT
        for name in again.start.tensors
    )
    start = stage_fingerprint(again.start.tensors)
    contributed = (
        tuple(
            Distance(
                name,
                fingerprint_distance(
                    values, again.contributed.tensors[name], again.start.tensors[name]
                ),
            )
            for name, values in recorded.contributed.tensors.items()
        )
        if granularity == "tensor"
        else (
            Distance(
                "the stage's tensors at once",
                fingerprint_distance(
                    stage_fingerprint(recorded.contributed.tensors),
                    stage_fingerprint(again.contributed.tensors),
                    start,
                ),
            ),
        )
    )
    return StageVerdict(
        cluster=recorded.cluster,
        stage=recorded.stage,
        mode=mode,
        bound=bound,
        start_agrees=start_agrees,
        inner_distances=tuple(
            (r.inner_step, fingerprint_distance(r.fingerprint, a.fingerprint, start))
            for r, a in zip(recorded.inner_steps, again.inner_steps, strict=True)
        ),
        contributed=contributed,
    )


@dataclass(frozen=True)
class Dispute:
    """Where a re-execution first parts from the record."""

    cluster: int
    inner_step: int | None
    """The global inner step; None when the stage did not even start from the recorded state
    (``start``) or only its contribution differs (``contribution``)."""
    where: str
    """``start``, ``inner step`` or ``contribution``."""
    stages: tuple[int, ...]
    """The stages that disagree there."""
    offset: int | None = None
    """The inner step's position in the outer step (0-based), with ``inner_step``."""


def first_dispute(verdicts: list[StageVerdict], *, first_inner_step: int) -> Dispute | None:
    """The earliest point where any of one cluster's stages disagrees (verdicts of one
    cluster), or None."""
    if not verdicts:
        return None
    cluster = verdicts[0].cluster
    unstarted = tuple(v.stage for v in verdicts if v.problems or not v.start_agrees)
    if unstarted:
        return Dispute(cluster=cluster, inner_step=None, where="start", stages=unstarted)
    firsts = [(v.first_disagreement, v.stage) for v in verdicts if v.first_disagreement is not None]
    if firsts:
        step = min(i for i, _ in firsts)
        stages = tuple(sorted(s for i, s in firsts if i == step))
        return Dispute(
            cluster=cluster,
            inner_step=step,
            where="inner step",
            stages=stages,
            offset=step - first_inner_step,
        )
    contributed = tuple(v.stage for v in verdicts if not v.contributed_agrees)
    if contributed:
        return Dispute(cluster=cluster, inner_step=None, where="contribution", stages=contributed)
    return None
