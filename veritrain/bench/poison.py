"""``veritrain bench poison``: how well the verdicts catch poisoned, lazy and free-riding
clusters, how often they flag honest ones, and what exclusion saves.

Setup (issue #17): 4 clusters on the tiny preset (blocking DiLoCo, its model and corpus), one
stage, 3 seeds; runs are simulated in one process over the trainer's own inner step, outer
algorithm, verdicts and contribution scores (poison_run.py). Per seed:

* a clean run (every cluster honest): every verdict on a cluster is an honest judgement; a flag
  is a false positive;
* per attack, a run where one cluster attacks in every round from round 2 on, with exclusion
  (the default) and again without: a round counts as detected when the attacker is flagged.

Reported: per attack the detection rate over attacked rounds and which rules fired, the
false-positive rate of the clean runs, and the final held-out loss of each attack run with and
without exclusion against the clean run's. Targets: detection >= 95 %, false positives <= 1 %,
loss with exclusion within 2 % of clean.

Besides the verdicts, every round the attacker's contribution is re-executed as ``veritrain
audit`` re-executes a drawn pair (poison_run.py): per attack, how many attacked pairs that
catches and how many honest ones (its rounds before the attack) it wrongly catches, and the
smallest sample K of the run's T x C pairs that ``veritrain audit --sample K`` needs to catch the
attacker with probability >= 95 % (veritrain/audit/spot_check.py).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import mean
from typing import Any

import torch

from trainer.api import assignment_rule, default_data_dir
from trainer.config import TrainConfig
from trainer.data.build import prepare_data
from trainer.data.reader import BatchReader
from trainer.presets import run_preset
from trainer.runtime.determinism import make_deterministic
from veritrain.audit.spot_check import catch_probability
from veritrain.bench.poison_run import SCENARIOS, PoisonRun, Scenario, attacked_rounds, simulate
from veritrain.errors import BenchError

DETECTION_TARGET = 0.95
FALSE_POSITIVE_TARGET = 0.01
LOSS_TARGET = 0.02
"""Final loss with exclusion at most this much (relative) above the clean run's."""


@dataclass(frozen=True, kw_only=True)
class PoisonBenchConfig:
    quick: bool = False
    seeds: int | None = None
    """Default 3 (1 with ``quick``)."""
    clusters: int = 4
    outer_steps: int | None = None
    """T; default 8 (5 with ``quick``)."""
    inner_steps: int | None = None
    """H; default the preset's 20 (10 with ``quick``)."""
    preset: str = "tiny"
    scenarios: tuple[Scenario, ...] = SCENARIOS
    data_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.clusters < 3:
            raise BenchError(
                f"expected at least 3 clusters (exclusion needs a majority), got {self.clusters}"
            )

    def run_config(self, seed: int) -> TrainConfig:
        base = run_preset(self.preset)
        if base.method != "diloco":
            raise BenchError(
                f"expected a DiLoCo preset (blocking), got {base.method!r} for {self.preset!r}"
            )
        return replace(
            base,
            run_id=f"bench-poison-{seed}",
            clusters=self.clusters,
            stages=1,
            seed=seed,
            outer_steps=self.outer_steps or (5 if self.quick else 8),
            inner_steps=self.inner_steps or (10 if self.quick else base.inner_steps),
        )


@dataclass(kw_only=True)
class AttackResult:
    active_rounds: int = 0
    detected_rounds: int = 0
    rules: Counter[str] = field(default_factory=Counter)
    honest_flags: int = 0
    """Flags on the honest clusters of the attack runs (with exclusion)."""
    losses_excluded: list[float] = field(default_factory=list)
    losses_kept: list[float] = field(default_factory=list)
    reexecuted_caught: int = 0
    """Attacked rounds whose re-executed contribution did not match what the attacker sent."""
    reexecuted_honest: int = 0
    """Rounds before the attack that were re-executed (honest pairs) ..."""
    reexecuted_honest_caught: int = 0
    """... and of them, those re-execution wrongly caught."""
    pairs: int = 0
    """(outer step, cluster) pairs of one run: T x C."""

    @property
    def detection_rate(self) -> float:
        return self.detected_rounds / self.active_rounds if self.active_rounds else 0.0

    @property
    def reexecution_rate(self) -> float:
        return self.reexecuted_caught / self.active_rounds if self.active_rounds else 0.0

    def audit_sample_for(self, probability: float, seeds: int) -> int | None:
        """Smallest K for which ``veritrain audit --sample K`` of one run catches the attacker
        with at least ``probability`` (its attacked pairs: those re-execution catches)."""
        if not self.pairs or not seeds:
            return None
        lazy = self.reexecuted_caught // seeds
        return next(
            (
                k
                for k in range(1, self.pairs + 1)
                if catch_probability(self.pairs, lazy, k) >= probability
            ),
            None,
        )


@dataclass(kw_only=True)
class PoisonBenchResult:
    config: dict[str, Any]
    attacks: dict[str, AttackResult] = field(default_factory=dict)
    honest_judgements: int = 0
    false_positives: int = 0
    false_positive_rules: Counter[str] = field(default_factory=Counter)
    clean_losses: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def false_positive_rate(self) -> float:
        return self.false_positives / self.honest_judgements if self.honest_judgements else 0.0

    def to_dict(self) -> dict[str, Any]:
        clean = mean(self.clean_losses)
        attacks = {}
        for name, a in self.attacks.items():
            excluded, kept = mean(a.losses_excluded), mean(a.losses_kept)
            attacks[name] = {
                "detection_rate": a.detection_rate,
                "detected_rounds": a.detected_rounds,
                "active_rounds": a.active_rounds,
                "rules": dict(sorted(a.rules.items())),
                "honest_flags": a.honest_flags,
                "reexecution_rate": a.reexecution_rate,
                "reexecuted_caught": a.reexecuted_caught,
                "reexecuted_honest": a.reexecuted_honest,
                "reexecuted_honest_caught": a.reexecuted_honest_caught,
                "pairs_per_run": a.pairs,
                "audit_sample_for_95": a.audit_sample_for(
                    DETECTION_TARGET, int(self.config.get("seeds", 1))
                ),
                "final_loss_with_exclusion": excluded,
                "final_loss_without_exclusion": kept,
                "loss_gap_with_exclusion": excluded / clean - 1.0,
                "loss_gap_without_exclusion": kept / clean - 1.0,
                "meets_targets": a.detection_rate >= DETECTION_TARGET
                and excluded / clean - 1.0 <= LOSS_TARGET,
            }
        return {
            "config": self.config,
            "attacks": attacks,
            "false_positive_rate": self.false_positive_rate,
            "false_positives": self.false_positives,
            "false_positive_rules": dict(sorted(self.false_positive_rules.items())),
            "honest_judgements": self.honest_judgements,
            "clean_final_loss": clean,
            "targets": {
                "detection_rate": DETECTION_TARGET,
                "false_positive_rate": FALSE_POSITIVE_TARGET,
                "loss_gap_with_exclusion": LOSS_TARGET,
            },
            "seconds": self.seconds,
        }

    def lines(self) -> list[str]:
        d = self.to_dict()
        c = d["config"]
        lines = [
            f"veritrain bench poison: {c['clusters']} clusters, {c['preset']} preset, "
            f"T={c['outer_steps']} H={c['inner_steps']}, {c['seeds']} seed(s), "
            f"{self.seconds:.0f} s",
            f"clean runs: false positives {self.false_positives}/{self.honest_judgements} "
            f"({100 * self.false_positive_rate:.1f} %), final loss {d['clean_final_loss']:.4f}",
            f"{'attack':<20} {'detected':>10} {'rate':>7}  {'loss excl.':>10} {'loss kept':>10}"
            f"  {'re-exec':>8} {'K95':>4}  rules",
        ]
        honest_pairs = sum(a["reexecuted_honest"] for a in d["attacks"].values())
        honest_caught = sum(a["reexecuted_honest_caught"] for a in d["attacks"].values())
        for name, a in d["attacks"].items():
            rules = ", ".join(f"{k} {v}" for k, v in a["rules"].items())
            detected = f"{a['detected_rounds']}/{a['active_rounds']}"
            reexecuted = f"{a['reexecuted_caught']}/{a['active_rounds']}"
            k95 = "-" if a["audit_sample_for_95"] is None else str(a["audit_sample_for_95"])
            lines.append(
                f"{name:<20} {detected:>10} {100 * a['detection_rate']:>6.1f}%"
                f"  {100 * a['loss_gap_with_exclusion']:>+9.2f}%"
                f" {100 * a['loss_gap_without_exclusion']:>+9.2f}%"
                f"  {reexecuted:>8} {k95:>4}  {rules}"
            )
        lines.append(
            "re-exec: attacked rounds whose re-executed contribution did not match (honest "
            f"rounds re-executed: {honest_pairs}, wrongly caught: {honest_caught}); K95: the "
            "smallest `veritrain audit --sample K` of one run's "
            f"{c['outer_steps'] * c['clusters']} pairs that catches the attacker with >= 95 %"
        )
        return lines


def run_poison_bench(
    config: PoisonBenchConfig, say: Callable[[str], None] = print
) -> PoisonBenchResult:
    """Every scenario of the module docstring, for every seed."""
    started = time.perf_counter()
    seeds = config.seeds or (1 if config.quick else 3)
    first = config.run_config(0)
    make_deterministic(
        first.seed, 0, torch.device("cpu")
    )  # one thread: repeatable, and fair to 2 cores
    prepared = prepare_data(first.data, config.data_dir or default_data_dir())
    result = PoisonBenchResult(
        config={
            "preset": config.preset,
            "clusters": config.clusters,
            "outer_steps": first.outer_steps,
            "inner_steps": first.inner_steps,
            "seeds": seeds,
            "quick": config.quick,
        }
    )
    for seed in range(seeds):
        run_config = config.run_config(seed)
        rule = assignment_rule(run_config, prepared.manifest)
        reader = BatchReader(prepared.manifest, rule, prepared.source)
        attacker = 1 + seed % (config.clusters - 1)
        say(f"seed {seed}: clean run")
        clean = simulate(PoisonRun(config=run_config, scenario=None), reader)
        result.clean_losses.append(clean.final_eval_loss)
        for verdicts in clean.verdicts:
            for v in verdicts:
                result.honest_judgements += 1
                if v.flags:
                    result.false_positives += 1
                    result.false_positive_rules.update(v.flags)
        for scenario in config.scenarios:
            outcome = result.attacks.setdefault(scenario, AttackResult())
            run = PoisonRun(config=run_config, scenario=scenario, attacker=attacker)
            say(f"seed {seed}: {scenario} (cluster {attacker}), with exclusion")
            excluded = simulate(run, reader)
            outcome.pairs = run_config.outer_steps * config.clusters
            attacked = set(attacked_rounds(run))
            for t, caught in enumerate(excluded.reexecuted):
                if t in attacked:
                    outcome.reexecuted_caught += caught
                else:
                    outcome.reexecuted_honest += 1
                    outcome.reexecuted_honest_caught += caught
            for t in attacked_rounds(run):
                mine = excluded.verdicts[t][attacker]
                outcome.active_rounds += 1
                outcome.detected_rounds += bool(mine.flags)
                outcome.rules.update(mine.flags)
                outcome.honest_flags += sum(
                    1 for v in excluded.verdicts[t] if v.cluster != attacker and v.flags
                )
            outcome.losses_excluded.append(excluded.final_eval_loss)
            say(f"seed {seed}: {scenario} (cluster {attacker}), without exclusion")
            kept_config = replace(
                run_config, outer=replace(run_config.outer, anomaly_exclude=False)
            )
            kept = simulate(replace(run, config=kept_config), reader)
            outcome.losses_kept.append(kept.final_eval_loss)
    result.seconds = time.perf_counter() - started
    return result
