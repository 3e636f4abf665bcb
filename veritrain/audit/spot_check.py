"""``veritrain audit --sample K``: re-execute K (outer step, cluster) pairs drawn with the
auditor's own randomness, and say how likely that was to catch a lazy cluster.

The verdicts of check 12 are statistics of what each cluster sent; a cluster that trains
honestly on data other than its assignment sends an update those statistics cannot tell from an
honest one on small models (docs/outer-algorithm.md §4, docs/benchmarks.md). Re-executing the
cluster's H inner steps on its assigned windows can (``veritrain reproduce --step T --cluster
J``): its signed contribution digest, or under tolerance its per-inner-step commitments, do not
match. Re-executing every pair costs as much as the training; re-executing a random sample does
not, and a cluster cannot know which pairs will be drawn when the draw is the auditor's (Verde,
Arun et al. 2025, arXiv 2502.19405: refereed delegation with spot checks).

What a sample of K of the run's N pairs catches (drawn without replacement, uniformly):

* a cluster lazy in ``L`` pairs is caught unless all K draws miss them:
  ``1 − C(N − L, K) / C(N, K)``;
* the report gives it for a cluster lazy in every step it took part in (the pairs of the
  cluster with the fewest) and for one lazy pair alone (``K / N``).

Steps: 1. the log verifies (``reproduce``'s first step, once per pair); 2. the pairs are drawn
from ``secrets.SystemRandom`` (or a seed, for a repeatable audit: an operator who learns the
seed knows the draw); 3. each pair is re-executed by
:func:`veritrain.audit.reproduce.reproduce_step`.
"""

from __future__ import annotations

import math
import random
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from veritrain.audit.comparison import Comparison
from veritrain.audit.modes import Requested
from veritrain.errors import ReproduceError
from veritrain.sources import RunSource
from veritrain.sources.recorded_run import RecordedRun

Pair = tuple[int, int]
"""(outer step, cluster)."""


def run_pairs(run: RecordedRun) -> list[Pair]:
    """Every (outer step, cluster) of the run: the clusters of each step's recorded quorum."""
    return [(s.step, c) for _, s in run.outer_steps for c in s.quorum.clusters]


def draw_pairs(pairs: Sequence[Pair], sample: int, rng: random.Random) -> list[Pair]:
    """``sample`` distinct pairs (all of them when there are fewer), in step order."""
    if sample < 1:
        raise ReproduceError(f"expected a sample of at least 1 pair, got {sample}")
    return sorted(rng.sample(list(pairs), min(sample, len(pairs))))


def catch_probability(total: int, lazy: int, sample: int) -> float:
    """Probability that ``sample`` of ``total`` pairs drawn without replacement include at least
    one of ``lazy`` pairs (module docstring)."""
    if lazy <= 0 or total <= 0:
        return 0.0
    sample = min(sample, total)
    return 1.0 - math.comb(total - lazy, sample) / math.comb(total, sample)


@dataclass(kw_only=True)
class SpotCheck:
    run_id: str
    pairs: int
    """N: the run's (outer step, cluster) pairs."""
    fewest_steps: int
    """Steps of the cluster that took part in the fewest (a cluster lazy in all of them)."""
    drawn: list[Pair]
    seeded: bool
    comparisons: list[Comparison] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return len(self.comparisons) == len(self.drawn) and all(c.ok for c in self.comparisons)

    @property
    def caught(self) -> list[Pair]:
        return [(c.step, c.cluster or 0) for c in self.comparisons if not c.ok]

    @property
    def catches_lazy_cluster(self) -> float:
        return catch_probability(self.pairs, self.fewest_steps, len(self.drawn))

    @property
    def catches_one_pair(self) -> float:
        return catch_probability(self.pairs, 1, len(self.drawn))

    def render(self) -> str:
        k, n = len(self.drawn), self.pairs
        origin = (
            "a given seed: repeatable, and known to whoever knows the seed"
            if self.seeded
            else "this machine's own randomness"
        )
        lines = [
            f"spot check of run {self.run_id!r}: {k} of {n} (outer step, cluster) pairs "
            f"drawn with {origin}",
            f"  a cluster lazy in all of its {self.fewest_steps} steps is caught with "
            f"probability {100 * self.catches_lazy_cluster:.1f} %; "
            f"one lazy pair alone with {100 * self.catches_one_pair:.1f} %",
        ]
        for c in self.comparisons:
            verdict = "match" if c.ok else "NO MATCH"
            problems = "; ".join(c.mismatched[:2])
            lines.append(
                f"  step {c.step} cluster {c.cluster}: {verdict} ({c.mode})"
                + (f": {problems}" if problems else "")
            )
        caught = ", ".join(f"step {t} cluster {j}" for t, j in self.caught)
        lines.append(f"CAUGHT: {caught}" if caught else "every sampled pair MATCHES")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "pairs": self.pairs,
            "sample": len(self.drawn),
            "drawn": [list(p) for p in self.drawn],
            "seeded": self.seeded,
            "catch_probability_lazy_cluster": self.catches_lazy_cluster,
            "catch_probability_one_pair": self.catches_one_pair,
            "ok": self.ok,
            "caught": [list(p) for p in self.caught],
            "comparisons": [c.to_json() for c in self.comparisons],
        }


def spot_check(
    source: RunSource,
    run_id: str | None,
    sample: int,
    *,
    seed: int | None = None,
    mode: Requested = "auto",
    say: Callable[[str], None] | None = None,
) -> SpotCheck:
    """Draw ``sample`` pairs and re-execute each (module docstring)."""
    from veritrain.audit.reproduce import reproduce_step, verified_run

    run, _ = verified_run(source, run_id)
    pairs = run_pairs(run)
    if not pairs:
        raise ReproduceError(f"run {run.run_id!r} records no outer step to re-execute")
    rng = random.Random(seed) if seed is not None else secrets.SystemRandom()
    steps_per_cluster: dict[int, int] = {}
    for _, cluster in pairs:
        steps_per_cluster[cluster] = steps_per_cluster.get(cluster, 0) + 1
    check = SpotCheck(
        run_id=run.run_id,
        pairs=len(pairs),
        fewest_steps=min(steps_per_cluster.values()),
        drawn=draw_pairs(pairs, sample, rng),
        seeded=seed is not None,
    )
    for step, cluster in check.drawn:
        if say is not None:
            say(f"re-executing cluster {cluster}'s contribution to outer step {step}")
        check.comparisons.append(reproduce_step(source, run.run_id, step, cluster, mode=mode))
    return check
