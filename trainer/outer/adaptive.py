"""Adaptive number of inner steps H: just enough local compute to hide the exchange.

With the one-step-delay overlap, round t's all-gather runs while round t+1's H inner steps
compute, so the exchange is hidden when ``H · compute_seconds_per_step ≥ comm_seconds``. A
larger H than that buys nothing in wall-clock time and costs convergence per token (DiLoCo,
Douillard et al. 2023, §3: quality degrades as H grows), so H tracks the smallest hiding value:

* the target is ``ceil(HEADROOM · comm_seconds / compute_seconds_per_step)``; the headroom
  absorbs jitter in the measured times;
* when the exchange would be exposed (target above H) H jumps to the target at once;
* when H is more than needed it shrinks by at most a quarter per round, so one fast exchange
  does not throw away the hiding margin (timings are noisy, the cost of exposure is not);
* the result is clamped to ``[min_steps, max_steps]``.

Deterministic given its inputs: the runtime feeds it all-reduced timings so every rank agrees.
"""

from __future__ import annotations

import math

from trainer.errors import ConfigError

HEADROOM = 1.2
"""Aim for an exchange that fills at most 1/1.2 ≈ 83% of a round's compute."""
MAX_SHRINK = 0.25
"""Largest fraction by which H shrinks in one round."""


def next_inner_steps(
    current: int,
    *,
    comm_seconds: float,
    compute_seconds_per_step: float,
    min_steps: int,
    max_steps: int,
) -> int:
    """H for the next round given the last exchange's duration and the compute time per step."""
    if not 1 <= min_steps <= max_steps:
        raise ConfigError(
            "expected 1 <= min_steps <= max_steps, got "
            f"min_steps={min_steps}, max_steps={max_steps}"
        )
    if current < 1:
        raise ConfigError(f"expected current inner steps >= 1, got {current}")
    for name, value in (
        ("comm_seconds", comm_seconds),
        ("compute_seconds_per_step", compute_seconds_per_step),
    ):
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"expected {name} to be a finite number >= 0, got {value}")
    if compute_seconds_per_step == 0.0:
        # No compute measured (e.g. a dry run): nothing to hide behind, keep H as it is.
        return min(max(current, min_steps), max_steps)
    target = math.ceil(HEADROOM * comm_seconds / compute_seconds_per_step)
    shrunk = max(target, math.ceil(current * (1.0 - MAX_SHRINK)))
    proposed = target if target >= current else shrunk
    return min(max(proposed, min_steps), max_steps)
