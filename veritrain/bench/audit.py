"""``veritrain bench audit``: measure the tolerance bound instead of guessing it.

The benchmark trains the demo's run (the ``tiny`` preset, DiLoCoX, 2 clusters x 2 stages) for
three outer steps in memory, then executes outer step 2 again, from the recorded state after
step 1, many ways with the trainer's own code (trainer.api.reexecute_outer_step):

* **legitimately different** -- the same computation, other arithmetic: 2 intra-op threads
  instead of 1; a float64 re-execution; CUDA instead of CPU when a GPU is present; and bf16
  autocast at 2 threads against bf16 autocast at 1 (bf16 on other hardware);
* **across precisions** -- bf16 autocast against fp32: legitimate, but a different
  arithmetic of 8 significant bits, measured and bounded separately;
* **forged** -- cluster 1 cheats in step 2 (trainer/runtime/forgery.py): skips its last
  inner step; trains its last inner step on a window it was not assigned; uses 1.1 times the
  inner learning rate; scales its contribution by 1.05; computes the round from the state of
  a round earlier (stale).

Each execution plays the recorded one and the fp32 single-thread execution the auditor's
re-execution (for the bf16 pair, bf16 at 1 thread). The tolerance rule (veritrain/audit) is
applied to every pair with three measures, each a relative distance
‖θ′ − θ‖ / ‖θ − θ_start‖:

* ``checkpoint``: every published model tensor after the step (whole-step ``reproduce``);
* ``contribution``: every tensor's fingerprint of the parameters a cluster contributed from
  (``reproduce --cluster J``), for every (cluster, stage);
* ``inner_steps``: every stage's fingerprint after every inner step, against the update since
  the outer step began (``reproduce --bisect``);

plus ``start`` (did the cluster start from the recorded state) and the eval-loss difference.
An execution's score is the largest distance any measure gives: the rule flags it when the
score exceeds the bound. ``legit_max`` is the largest score of a legitimate execution,
``forged_min`` the smallest of a forged one; the recommended bound is their geometric mean
(an equal margin on both sides), and docs/auditing.md publishes the measured numbers.

Across precisions the rule measures a stage (and the whole model) at a time
(veritrain/audit/modes.py), so the cross-precision pair and the forgeries are also scored that
way (``stage_score``) against ``CROSS_PRECISION_DISTANCE_BOUND``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from records.commitments import InnerCommitments
from trainer.api import Reexecution, reexecute_outer_step, train
from trainer.checkpoint_layout import CheckpointFiles, inner_file
from trainer.config import TrainConfig, with_overrides
from trainer.data.build import PreparedData, prepare_data
from trainer.execution import Execution
from trainer.memory_recorder import InMemoryRecorder, MemoryRecording, shared_sink
from trainer.presets import run_preset
from trainer.runtime.forgery import Forgery
from veritrain.audit.distance import (
    fingerprint_distance,
    global_distance,
    stage_fingerprint,
    tensor_distances,
)
from veritrain.audit.inner_steps import judge_stage
from veritrain.bench.scratch import scratch_dir
from veritrain.policy import CROSS_PRECISION_DISTANCE_BOUND, PARAMETER_DISTANCE_BOUND

Kind = Literal["legit", "cross-precision", "forged"]
AUDITED_STEP = 2
"""Step 2 starts from a state with a step before it (the stale forgery needs one) and runs
past the warm-up of the learning rate."""
FORGER = 1


@dataclass(frozen=True, kw_only=True)
class AuditBenchConfig:
    quick: bool = False
    preset: str = "tiny"
    method: str = "dilocox"
    """The demo's method: under its one-step delay a step's own training shows only in its
    contributions and commitments, not in its published checkpoint."""
    inner_steps: int | None = None
    """H (default: the preset's 20; 8 with ``quick``)."""
    seed: int = 0
    workdir: Path | None = None

    def run_config(self) -> TrainConfig:
        # One step more than the audited one: a run's last step also applies its own round,
        # which would make the audited step unrepresentative of the others.
        base = with_overrides(
            run_preset(self.preset),
            method=self.method,
            outer_steps=AUDITED_STEP + 2,
            seed=self.seed,
        )
        inner = self.inner_steps or (8 if self.quick else base.inner_steps)
        return with_overrides(base, inner_steps=inner, run_id="bench-audit")


@dataclass(frozen=True)
class Plan:
    """One pair: what is recorded (``recorded``) against the auditor's re-execution."""

    name: str
    kind: Kind
    recorded: Execution | None
    forgery: Forgery | None = None
    stale: bool = False
    """The forger starts from the state of a round earlier."""
    auditor: Execution | None = None
    """The re-execution it is judged against (None: fp32, 1 thread, as recorded)."""


def plans(config: TrainConfig) -> list[Plan]:
    last = config.inner_steps_of(AUDITED_STEP) - 1  # the audited round's own last inner step
    chosen = [
        Plan("2 intra-op threads", "legit", Execution(threads=2)),
        Plan("float64 re-execution", "legit", Execution(precision="fp64")),
        Plan(
            "bf16 at 2 threads vs bf16 at 1",
            "legit",
            Execution(precision="bf16", threads=2),
            auditor=Execution(precision="bf16"),
        ),
        Plan("bf16 autocast vs fp32", "cross-precision", Execution(precision="bf16")),
        Plan(
            f"skip inner step {last}",
            "forged",
            None,
            Forgery(cluster=FORGER, step=AUDITED_STEP, kind="skip_inner_step", inner_step=last),
        ),
        Plan(
            f"other data window at inner step {last}",
            "forged",
            None,
            Forgery(cluster=FORGER, step=AUDITED_STEP, kind="other_window", inner_step=last),
        ),
        Plan(
            "inner lr x1.1",
            "forged",
            None,
            Forgery(cluster=FORGER, step=AUDITED_STEP, kind="lr_scale", factor=1.1),
        ),
        Plan(
            "contribution x1.05",
            "forged",
            None,
            Forgery(cluster=FORGER, step=AUDITED_STEP, kind="contribution_scale", factor=1.05),
        ),
        Plan("stale round (state of a round earlier)", "forged", None, stale=True),
    ]
    if torch.cuda.is_available():
        chosen.insert(2, Plan("CUDA vs CPU", "legit", Execution(device="cuda")))
    return chosen


@dataclass(frozen=True, kw_only=True)
class Measure:
    """One measure's distances for one pair."""

    values: tuple[float, ...]
    worst: str = ""

    @property
    def max(self) -> float:
        return max(self.values, default=0.0)

    def to_dict(self) -> dict[str, Any]:
        finite = [v for v in self.values if math.isfinite(v)]
        return {
            "max": _json_float(self.max),
            "median": _json_float(statistics.median(self.values)) if self.values else 0.0,
            "count": len(self.values),
            "worst": self.worst,
            "quantiles": [_json_float(float(q)) for q in np.quantile(finite, [0.5, 0.9, 0.99])]
            if finite
            else [],
        }


@dataclass(frozen=True, kw_only=True)
class PairResult:
    name: str
    kind: Kind
    checkpoint: Measure
    checkpoint_global: float
    """The checkpoint measure over all model tensors at once."""
    contribution: Measure
    contribution_stage: Measure
    """The contribution measure over a whole stage at once (the tensors' fingerprints summed)."""
    inner_steps: Measure
    start_agrees: bool
    eval_loss_delta: float
    seconds: float

    @property
    def score(self) -> float:
        """The largest distance of the per-tensor rule (same precision)."""
        if not self.start_agrees:
            return math.inf
        return max(self.checkpoint.max, self.contribution.max, self.inner_steps.max)

    @property
    def stage_score(self) -> float:
        """The largest distance of the stage-at-a-time rule (across precisions)."""
        if not self.start_agrees:
            return math.inf
        return max(self.checkpoint_global, self.contribution_stage.max, self.inner_steps.max)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "score": _json_float(self.score),
            "stage_score": _json_float(self.stage_score),
            "checkpoint": self.checkpoint.to_dict(),
            "checkpoint_global": _json_float(self.checkpoint_global),
            "contribution": self.contribution.to_dict(),
            "contribution_stage": self.contribution_stage.to_dict(),
            "inner_steps": self.inner_steps.to_dict(),
            "start_agrees": self.start_agrees,
            "eval_loss_delta": self.eval_loss_delta,
            "seconds": self.seconds,
        }


@dataclass(frozen=True, kw_only=True)
class AuditBenchResult:
    config: Mapping[str, Any]
    pairs: list[PairResult]
    train_seconds: float
    distributions: Mapping[str, list[float]] = field(default_factory=dict)

    def _scores(self, kind: Kind) -> list[float]:
        return [p.score for p in self.pairs if p.kind == kind]

    @property
    def legit_max(self) -> float:
        return max(self._scores("legit"), default=0.0)

    @property
    def forged_min(self) -> float:
        return min(self._scores("forged"), default=math.inf)

    @property
    def recommended_bound(self) -> float:
        """The geometric mean of legit_max and forged_min: the same margin on both sides."""
        if self.legit_max <= 0 or not math.isfinite(self.forged_min):
            return math.nan
        return math.sqrt(self.legit_max * self.forged_min)

    def to_dict(self) -> dict[str, Any]:
        cross = [p.stage_score for p in self.pairs if p.kind != "forged"]
        forged = [p.stage_score for p in self.pairs if p.kind == "forged"]
        return {
            "config": dict(self.config),
            "legit_max": _json_float(self.legit_max),
            "forged_min": _json_float(self.forged_min),
            "ratio": _json_float(self.forged_min / self.legit_max) if self.legit_max else None,
            "bound": PARAMETER_DISTANCE_BOUND,
            "recommended_bound": _json_float(self.recommended_bound),
            "every_forgery_flagged": all(
                s > PARAMETER_DISTANCE_BOUND for s in self._scores("forged")
            ),
            "no_legit_flagged": all(s <= PARAMETER_DISTANCE_BOUND for s in self._scores("legit")),
            "cross_precision": {
                "legit_max": _json_float(max(cross, default=0.0)),
                "forged_min": _json_float(min(forged, default=math.inf)),
                "bound": CROSS_PRECISION_DISTANCE_BOUND,
                "forgeries_missed": [
                    p.name
                    for p in self.pairs
                    if p.kind == "forged" and p.stage_score <= CROSS_PRECISION_DISTANCE_BOUND
                ],
            },
            "pairs": [p.to_dict() for p in self.pairs],
            "distributions": {
                k: [_json_float(v) for v in values] for k, values in self.distributions.items()
            },
            "train_seconds": self.train_seconds,
        }

    def lines(self) -> list[str]:
        c = self.config
        columns = [
            "checkpt",
            "(all)",
            "contrib",
            "(stage)",
            "inner",
            "start",
            "|Δeval|",
            "score",
            "(stage)",
        ]
        out = [
            f"audit: {c['preset']} preset, {c['method']}, {c['clusters']} clusters x {c['stages']} "
            f"stages, H={c['inner_steps']}, outer step {AUDITED_STEP} executed "
            f"{len(self.pairs) + 1} ways (trained in {self.train_seconds:.0f} s)",
            f"  {'execution':40} {'kind':15} " + " ".join(f"{name:>8}" for name in columns),
        ]
        for p in self.pairs:
            values = [
                p.checkpoint.max,
                p.checkpoint_global,
                p.contribution.max,
                p.contribution_stage.max,
                p.inner_steps.max,
            ]
            start = "ok" if p.start_agrees else "DIFF"
            shown = [f"{v:8.2g}" for v in values] + [f"{start:>8}"]
            shown += [f"{v:8.2g}" for v in (p.eval_loss_delta, p.score, p.stage_score)]
            out.append(f"  {p.name:40} {p.kind:15} " + " ".join(shown))
        data = self.to_dict()
        cross = data["cross_precision"]
        out += [
            f"  legit_max {self.legit_max:.3g}, forged_min {self.forged_min:.3g} "
            f"(ratio {data['ratio'] or 0:.3g}); published bound {PARAMETER_DISTANCE_BOUND} "
            f"(geometric mean {self.recommended_bound:.3g})",
            f"  every forgery flagged: {data['every_forgery_flagged']}; "
            f"no legitimate execution flagged: {data['no_legit_flagged']}",
            f"  across precisions, a stage at a time: legit max {cross['legit_max']:.3g}, "
            f"forged_min {cross['forged_min']:.3g}, bound {CROSS_PRECISION_DISTANCE_BOUND}; "
            f"missed: {cross['forgeries_missed'] or 'none'}",
        ]
        return out


def run_audit_bench(
    config: AuditBenchConfig, *, say: Callable[[str], None] = lambda _: None
) -> AuditBenchResult:
    run = config.run_config()
    with scratch_dir(config.workdir, prefix="veritrain-bench-audit-") as folder:
        data = prepare_data(run.data, folder / "corpus")
        say(f"training {run.outer_steps} outer steps of {config.preset} (H={run.inner_steps})")
        started = time.perf_counter()
        recording = _train(run, data)
        train_seconds = time.perf_counter() - started
        before = recording.state(AUDITED_STEP - 1)
        stale = _stale_state(before, recording.state(AUDITED_STEP - 2), run)
        cache: dict[str, Reexecution] = {}

        def execute(
            what: Execution | None, forgery: Forgery | None = None, *, stale_start: bool = False
        ) -> Reexecution:
            key = f"{what}|{forgery}|{stale_start}"
            if key not in cache:
                how = ", ".join(what.differences(run)) if what is not None else ""
                say(
                    f"executing outer step {AUDITED_STEP}: {how or 'as recorded'}"
                    + (f", forged: {forgery.kind} by cluster {forgery.cluster}" if forgery else "")
                    + (", from a stale state" if stale_start else "")
                )
                cache[key] = reexecute_outer_step(
                    run,
                    stale if stale_start else before,
                    AUDITED_STEP,
                    data=data,
                    execution=what,
                    forgery=forgery,
                )
            return cache[key]

        pairs = []
        for plan in plans(run):
            started = time.perf_counter()
            recorded = execute(plan.recorded, plan.forgery, stale_start=plan.stale)
            auditor = execute(plan.auditor)
            pairs.append(_pair(plan, recorded, auditor, before, time.perf_counter() - started))
            say(f"  {plan.name}: score {pairs[-1].score:.3g}")
    return AuditBenchResult(
        config={
            "preset": config.preset,
            "method": run.method,
            "clusters": run.clusters,
            "stages": run.stages,
            "inner_steps": run.inner_steps,
            "audited_step": AUDITED_STEP,
            "seed": run.seed,
            "quick": config.quick,
            "cuda": torch.cuda.is_available(),
        },
        pairs=pairs,
        train_seconds=train_seconds,
        distributions={
            kind: sorted(
                v
                for p in pairs
                if p.kind == kind
                for v in (*p.checkpoint.values, *p.contribution.values)
            )
            for kind in ("legit", "cross-precision", "forged")
        },
    )


def _train(config: TrainConfig, data: PreparedData) -> MemoryRecording:
    with shared_sink() as sink:
        train(config, InMemoryRecorder.factory(sink), data=data, quiet=True)
        return MemoryRecording(sink.items())


def _stale_state(
    before: CheckpointFiles, earlier: CheckpointFiles, config: TrainConfig
) -> CheckpointFiles:
    """``before`` with the forger's inner-loop files (its local parameters and AdamW moments)
    taken from a round earlier: it trains this round from where it stood a round ago. (Its
    outer algorithm's state stays current, or the round could not even be contributed.)"""
    own = {inner_file(FORGER, s) for s in range(config.stages)}
    tensors = {
        name: (earlier.tensors[name] if name in own else files)
        for name, files in before.tensors.items()
    }
    return CheckpointFiles(tensors, dict(before.json))


def _pair(
    plan: Plan, recorded: Reexecution, auditor: Reexecution, before: CheckpointFiles, seconds: float
) -> PairResult:
    checkpoint, _ = tensor_distances(_model(recorded.files), _model(auditor.files), _model(before))
    checkpoint_global = global_distance(
        _model(recorded.files), _model(auditor.files), _model(before)
    )
    signed = {(c.cluster, c.stage): c for c in recorded.record.commitments}
    again = {(c.cluster, c.stage): c for c in auditor.record.commitments}
    contribution: list[tuple[str, float]] = []
    stage_level: list[tuple[str, float]] = []
    inner: list[tuple[str, float]] = []
    start_agrees = True
    for key in sorted(signed):
        verdict = judge_stage(signed[key], again[key], mode="tolerance", bound=math.inf)
        start_agrees = start_agrees and verdict.start_agrees
        where = f"cluster {key[0]} stage {key[1]}"
        contribution += [(f"{where} {d.name}", d.value) for d in verdict.contributed]
        inner += [(f"{where} inner step {i}", d) for i, d in verdict.inner_distances]
        stage_level.append((where, _stage_distance(signed[key], again[key])))
    return PairResult(
        name=plan.name,
        kind=plan.kind,
        checkpoint=_measure([(d.name, d.value) for d in checkpoint]),
        checkpoint_global=checkpoint_global,
        contribution=_measure(contribution),
        contribution_stage=_measure(stage_level),
        inner_steps=_measure(inner),
        start_agrees=start_agrees,
        eval_loss_delta=abs(
            recorded.record.metrics.get("eval_loss", math.nan)
            - auditor.record.metrics.get("eval_loss", math.nan)
        ),
        seconds=seconds,
    )


def _stage_distance(recorded: InnerCommitments, again: InnerCommitments) -> float:
    return fingerprint_distance(
        stage_fingerprint(recorded.contributed.tensors),
        stage_fingerprint(again.contributed.tensors),
        stage_fingerprint(again.start.tensors),
    )


def _measure(named: Sequence[tuple[str, float]]) -> Measure:
    worst = max(named, key=lambda item: item[1], default=("", 0.0))
    return Measure(values=tuple(v for _, v in named), worst=worst[0])


def _model(files: CheckpointFiles) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for name, file in files.tensors.items():
        if name.startswith("model-"):
            tensors.update(file)
    return tensors


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else ("inf" if value > 0 else "nan")
