"""Where a verifier reads a run from: the ledger database and object store directly, or
the public HTTP API alone (``--api URL``), behind one small interface.

A source only *fetches*; it is never trusted. Every byte it returns is checked by the
verifier against hashes, signatures and proofs (objects are re-hashed by the verifier even
when the store already checks them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from ledger.db import create_engine, sqlite_file_missing
from ledger.errors import NotFoundError
from ledger.service import Ledger
from storage import ObjectStore, open_store
from veritrain.errors import VeritrainError
from veritrain.settings import Settings

SMALL_OBJECT_LIMIT = 64 << 20
"""Largest object read whole (manifests, statements, quotes)."""


@dataclass(frozen=True)
class MetricRow:
    step: int
    key: str
    value: float


class SourceError(VeritrainError):
    """The source cannot deliver what was asked (unknown run, unreachable server)."""


class CorruptObjectError(VeritrainError, ValueError):
    """An object's bytes do not hash to the digest it was fetched by."""


class RunSource(Protocol):
    description: str
    """Where the data comes from, for the report (a database URL or an API URL)."""

    def latest_run_id(self) -> str: ...

    def entry_bodies(self, run_id: str) -> list[bytes]: ...

    def tree_head(self, run_id: str) -> str:
        """The latest signed tree head (C2SP signed note text)."""
        ...

    def inclusion_proofs(self, run_id: str, size: int) -> Iterator[list[bytes]]:
        """The log's inclusion proof of every entry 0..size-1 in the tree of ``size``, in order."""
        ...

    def consistency_proof(self, run_id: str, old: int, new: int) -> list[bytes]: ...

    def metrics(self, run_id: str) -> list[MetricRow]: ...

    def read_object(self, digest: str, max_size: int = SMALL_OBJECT_LIMIT) -> bytes:
        """The object's bytes (unverified: the caller hashes them)."""
        ...

    def stream_object(self, digest: str) -> Iterator[bytes]: ...

    def object_size(self, digest: str) -> int: ...

    def close(self) -> None: ...


class DirectSource:
    """Reads the ledger database and the object store named by the settings."""

    def __init__(self, settings: Settings) -> None:
        if sqlite_file_missing(settings.database_url):
            raise SourceError(
                f"there is no ledger at {settings.database_url}: run `veritrain demo` or `veritrain train` first, "
                "or point VERITRAIN_DATABASE_URL at the run's database (or use --api URL)"
            )
        self._engine = create_engine(settings.database_url)
        self._ledger = Ledger(self._engine)
        self._store: ObjectStore = open_store(settings.store_url)
        self.description = f"{_redact(settings.database_url)} + {settings.store_url}"

    def latest_run_id(self) -> str:
        runs = sorted(self._ledger.list_runs(), key=lambda r: r.created_at)
        if not runs:
            raise SourceError("the ledger has no runs yet")
        return runs[-1].run_id

    def entry_bodies(self, run_id: str) -> list[bytes]:
        bodies: list[bytes] = []
        try:
            while page := self._ledger.entries(run_id, start=len(bodies), limit=1000):
                bodies.extend(e.body for e in page)
        except NotFoundError as exc:
            raise SourceError(str(exc)) from None
        return bodies

    def tree_head(self, run_id: str) -> str:
        return self._ledger.latest_tree_head(run_id).note

    def inclusion_proofs(self, run_id: str, size: int) -> Iterator[list[bytes]]:
        for proof in self._ledger.inclusion_proofs(run_id, size):
            yield list(proof.hashes)

    def consistency_proof(self, run_id: str, old: int, new: int) -> list[bytes]:
        return list(self._ledger.consistency_proof(run_id, old, new).hashes)

    def metrics(self, run_id: str) -> list[MetricRow]:
        return [MetricRow(step=m.step, key=m.key, value=m.value) for m in self._ledger.metrics(run_id)]

    def read_object(self, digest: str, max_size: int = SMALL_OBJECT_LIMIT) -> bytes:
        return self._store.read_bytes(digest, max_size)

    def stream_object(self, digest: str) -> Iterator[bytes]:
        with self._store.open(digest) as reader:
            yield from reader

    def object_size(self, digest: str) -> int:
        return self._store.size(digest)

    def close(self) -> None:
        self._store.close()
        self._engine.dispose()


def _redact(url: str) -> str:
    from sqlalchemy import make_url

    return make_url(url).render_as_string(hide_password=True)


def read_verified(source: RunSource, digest: str, max_size: int = SMALL_OBJECT_LIMIT) -> bytes:
    """An object's bytes, re-hashed here: whatever the source is, the caller gets the bytes
    the digest names or a :class:`CorruptObjectError`."""
    data = source.read_object(digest, max_size)
    _check(digest, hashlib.sha256(data).hexdigest())
    return data


def stream_verified(source: RunSource, digest: str, sink: Callable[[bytes], object] | None = None) -> int:
    """Stream an object through ``sink`` (e.g. a file's ``write``) while hashing it; return its
    size. The digest is checked at the end: a sink must treat its bytes as unverified until
    this returns."""
    hasher, size = hashlib.sha256(), 0
    for chunk in source.stream_object(digest):
        hasher.update(chunk)
        size += len(chunk)
        if sink is not None:
            sink(chunk)
    _check(digest, hasher.hexdigest())
    return size


def _check(digest: str, actual: str) -> None:
    if actual != digest:
        raise CorruptObjectError(f"object {digest[:16]}… is corrupt: its bytes hash to {actual[:16]}…")
