"""A run source over a local object store, for the audit tests: only the object reads a
re-executor's downloads use (``read_object``, ``stream_object``, ``read_range``,
``object_size``). Import it as ``from unit.veritrain.audit_store_source import StoreSource``."""

from __future__ import annotations

from collections.abc import Iterator

from storage import ObjectStore
from veritrain.sources import SMALL_OBJECT_LIMIT, MetricRow


class StoreSource:
    description = "a local object store (test)"

    def __init__(self, store: ObjectStore, *, flip_ranges: bool = False) -> None:
        self.store = store
        self.flip_ranges = flip_ranges
        """Serve ranged reads with their first byte flipped (a lying server)."""

    def read_object(self, digest: str, max_size: int = SMALL_OBJECT_LIMIT) -> bytes:
        return self.store.read_bytes(digest, max_size)

    def stream_object(self, digest: str) -> Iterator[bytes]:
        with self.store.open(digest) as reader:
            yield from reader

    def read_range(self, digest: str, start: int, end: int) -> bytes:
        with self.store.open(digest, start, end) as reader:
            data = reader.read()
        return bytes([data[0] ^ 1]) + data[1:] if self.flip_ranges else data

    def object_size(self, digest: str) -> int:
        return self.store.size(digest)

    def latest_run_id(self) -> str:
        raise NotImplementedError

    def entry_bodies(self, run_id: str) -> list[bytes]:
        raise NotImplementedError

    def tree_head(self, run_id: str) -> str:
        raise NotImplementedError

    def inclusion_proofs(self, run_id: str, size: int) -> Iterator[list[bytes]]:
        raise NotImplementedError

    def consistency_proof(self, run_id: str, old: int, new: int) -> list[bytes]:
        raise NotImplementedError

    def metrics(self, run_id: str) -> list[MetricRow]:
        raise NotImplementedError

    def close(self) -> None:
        self.store.close()
