"""Batches for a cluster's inner steps and for evaluation, read through a ``ShardSource``."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

from trainer.data.assignment import AssignmentRule
from trainer.data.manifest import DataManifest
from trainer.data.shards import ShardSource, WindowSource, decode_shard
from trainer.errors import DataError

Batch = tuple[torch.Tensor, torch.Tensor]
"""(inputs, targets), both (B, T) int64; targets are inputs shifted left by one token."""


class BatchReader:
    """Reads the windows the assignment rule names, verifying each shard once per load and
    keeping the most recently used shards decoded in memory."""

    def __init__(
        self,
        manifest: DataManifest,
        rule: AssignmentRule,
        source: ShardSource,
        *,
        cache_bytes: int = 256 * 2**20,
    ) -> None:
        self.manifest = manifest
        self.rule = rule
        self.source = source
        self._by_index = {s.index: s for s in manifest.shards}
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cache_bytes = cache_bytes

    def train_batch(self, cluster: int, inner_step: int) -> Batch:
        """The batch cluster ``cluster`` trains on at global inner step ``inner_step``."""
        windows = [self.rule.train_window(p) for p in self.rule.positions(cluster, inner_step)]
        return self._batch(windows)

    def eval_batches(self, count: int) -> list[Batch]:
        """The first ``count`` held-out batches (the same every time they are asked for)."""
        size = self.rule.sequences_per_step
        if count * size > self.rule.eval_windows:
            raise DataError(
                f"expected at most {self.rule.eval_windows // size} evaluation batches of {size} "
                f"windows from the held-out shards, got a request for {count}"
            )
        return [
            self._batch([self.rule.eval_window(b * size + j) for j in range(size)])
            for b in range(count)
        ]

    def _batch(self, windows: list[tuple[int, int]]) -> Batch:
        length = self.rule.context + 1
        if isinstance(self.source, WindowSource):  # only the windows a step reads were fetched
            source = self.source
            dtype = self.manifest.dtype
            rows = [
                source.window(self._by_index[shard], dtype, start, length)
                for shard, start in windows
            ]
        else:
            rows = [self._shard(shard)[start : start + length] for shard, start in windows]
        tokens = torch.from_numpy(np.stack(rows).astype(np.int64))  # (B, T + 1)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def _shard(self, index: int) -> np.ndarray:
        if index in self._cache:
            self._cache.move_to_end(index)
            return self._cache[index]
        info = self._by_index[index]
        tokens = decode_shard(self.source.read(info.sha256), info=info, dtype=self.manifest.dtype)
        self._cache[index] = tokens
        while (
            sum(t.nbytes for t in self._cache.values()) > self._cache_bytes and len(self._cache) > 1
        ):
            self._cache.popitem(last=False)
        return tokens
