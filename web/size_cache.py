"""Results computed from a run's log, cached by the log's size.

A run's log only grows, and its content up to a given size never changes (every size has
exactly one signed tree head). Anything derived from "the run at size N" -- the audit, the
chart series -- can therefore be computed once per size and reused until the next append.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class SizeKeyedCache(Generic[V]):
    """A thread-safe LRU of values keyed by ``(run id, log size, *details)``.

    Two threads missing the same key both compute it (no lock is held while computing, so
    a slow audit never blocks other requests); the results are equal, the last one is kept."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"expected a capacity >= 1, got {capacity}")
        self._capacity = capacity
        self._values: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Hashable, ...], compute: Callable[[], V]) -> V:
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = compute()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self._capacity:
                self._values.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._values)
