"""The deterministic rule that says which token windows each cluster trains on at each step.

Written so an auditor can re-implement it from this text alone:

1. A *window* is ``context + 1`` consecutive tokens inside one shard (inputs and the next-token
   targets). Shard tokens ``[w*context, w*context + context + 1)`` form window ``w``, for
   ``w < W = (shard_tokens - 1) // context``.
2. The training windows are numbered ``q = k*W + w`` over the training shards in stream order
   (``k`` counts training shards only; held-out shards are skipped): ``N`` windows in all.
3. Training consumes an endless stream of positions ``p = 0, 1, 2, ...``. Position ``p`` is in
   epoch ``e = p // N`` and reads window ``(a_e * (p mod N) + b_e) mod N``, an affine
   permutation of the windows, where ``h = SHA-256("veritrain-data:<seed>:<e>")``,
   ``b_e = int.from_bytes(h[8:16], "little") mod N`` and ``a_e`` is the first value
   ``>= int.from_bytes(h[0:8], "little") mod N`` (counting upwards, wrapping past N to 1) that
   is coprime with ``N``.
4. At global inner step ``i`` (counted from 0 over the whole run) cluster ``c`` of ``C`` takes
   positions ``[(i*C + c)*B, (i*C + c + 1)*B)`` where ``B`` = sequences per cluster per step.
   The same positions whatever the method (AllReduce, DiLoCo, DiLoCoX), so baselines see the same
   data in the same order.
5. Evaluation reads the held-out windows in order, unpermuted, from the first.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from typing import Any

from records.outer_step import DataRange, shard_runs
from trainer.errors import ConfigError, DataError

RULE_NAME = "veritrain.affine-window-permutation/v1"


@dataclass(frozen=True, kw_only=True)
class AssignmentRule:
    """Parameters of the rule above for one run."""

    context: int
    """Tokens of input per window (the window holds one more: the last target)."""
    sequences_per_step: int
    """B: windows each cluster trains on per inner step."""
    clusters: int
    seed: int
    shard_tokens: int
    train_shards: tuple[int, ...]
    """Indices (in the stream) of the training shards, in order."""
    eval_shards: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.windows_per_shard < 1:
            raise ConfigError(
                "expected shards of more than context "
                f"({self.context}) tokens, got {self.shard_tokens}"
            )
        if not self.train_shards:
            raise DataError("expected at least one training shard, got none (corpus too small?)")

    @property
    def windows_per_shard(self) -> int:
        return (self.shard_tokens - 1) // self.context

    @property
    def train_windows(self) -> int:
        return len(self.train_shards) * self.windows_per_shard

    @property
    def eval_windows(self) -> int:
        return len(self.eval_shards) * self.windows_per_shard

    def positions(self, cluster: int, inner_step: int) -> range:
        """Stream positions cluster ``cluster`` trains on at global inner step ``inner_step``."""
        start = (inner_step * self.clusters + cluster) * self.sequences_per_step
        return range(start, start + self.sequences_per_step)

    def train_window(self, position: int) -> tuple[int, int]:
        """(shard index, first token) of the window that stream position ``position`` reads."""
        n = self.train_windows
        a, b = _affine(self.seed, position // n, n)
        q = (a * (position % n) + b) % n
        shard, w = divmod(q, self.windows_per_shard)
        return self.train_shards[shard], w * self.context

    def eval_window(self, j: int) -> tuple[int, int]:
        """(shard index, first token) of held-out window ``j``."""
        if not 0 <= j < self.eval_windows:
            raise DataError(f"expected a held-out window below {self.eval_windows}, got {j}")
        shard, w = divmod(j, self.windows_per_shard)
        return self.eval_shards[shard], w * self.context

    def shards_read(
        self, cluster: int, first_inner_step: int, inner_steps: int
    ) -> tuple[tuple[int, int], ...]:
        """Shard indices a cluster read over some inner steps, as sorted [first, last] runs."""
        used = {
            self.train_window(p)[0]
            for i in range(first_inner_step, first_inner_step + inner_steps)
            for p in self.positions(cluster, i)
        }
        return shard_runs(used)

    def data_range(self, cluster: int, first_inner_step: int, inner_steps: int) -> DataRange:
        """What ``cluster`` trains on over ``inner_steps`` inner steps from global inner step
        ``first_inner_step``: the record an outer step writes, and a verifier recomputes."""
        sequences = inner_steps * self.sequences_per_step
        return DataRange(
            cluster=cluster,
            first_inner_step=first_inner_step,
            inner_steps=inner_steps,
            sequences=sequences,
            tokens=sequences * self.context,
            shards=self.shards_read(cluster, first_inner_step, inner_steps),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": RULE_NAME,
            "context": self.context,
            "window_tokens": self.context + 1,
            "windows_per_shard": self.windows_per_shard,
            "sequences_per_step": self.sequences_per_step,
            "clusters": self.clusters,
            "seed": self.seed,
            "train_windows": self.train_windows,
        }


@functools.lru_cache(maxsize=64)
def _affine(seed: int, epoch: int, n: int) -> tuple[int, int]:
    """(a_e, b_e) of step 3 in the module docstring."""
    h = hashlib.sha256(f"veritrain-data:{seed}:{epoch}".encode()).digest()
    a = int.from_bytes(h[0:8], "little") % n
    b = int.from_bytes(h[8:16], "little") % n
    if n == 1:
        return 1, 0
    while a == 0 or math.gcd(a, n) != 1:
        a = a + 1 if a + 1 < n else 1
    return a, b
