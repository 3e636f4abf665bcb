"""Where a run is read from: the ledger database and object store directly, or the public
HTTP API alone (``--api URL``), behind one small interface.

A source only *fetches*; it is never trusted. Every byte it returns is checked against
hashes, signatures and proofs by its caller (objects are re-hashed here even when the store
already checks them), and nothing it says about objects -- not even their sizes -- steers
what is checked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from veritrain.errors import CorruptObjectError

SMALL_OBJECT_LIMIT = 64 << 20
"""Largest object read whole (manifests, statements, quotes)."""


@dataclass(frozen=True)
class MetricRow:
    """One row of the metrics table as served: the value is whatever the source sent (a
    verifier compares it with the signed entry; a malformed value is a failed check)."""

    step: int
    key: str
    value: object


class RunSource(Protocol):
    description: str
    """Where the data comes from, for reports (a database URL or an API URL)."""

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
        """The object's bytes (unverified: use :func:`read_verified`)."""
        ...

    def stream_object(self, digest: str) -> Iterator[bytes]:
        """The object's bytes in chunks (unverified: use :func:`stream_verified`)."""
        ...

    def object_size(self, digest: str) -> int:
        """The object's size as the source reports it: for reports only (how much a full
        download would have been), never to decide what is checked."""
        ...

    def read_range(self, digest: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object (unverified: the caller checks them against
        something signed, e.g. a shard's chunk index). Raises on a short answer."""
        ...

    def close(self) -> None: ...


def read_verified(source: RunSource, digest: str, max_size: int = SMALL_OBJECT_LIMIT) -> bytes:
    """An object's bytes, re-hashed here: whatever the source is, the caller gets the bytes
    the digest names or a :class:`CorruptObjectError`."""
    data = source.read_object(digest, max_size)
    _check(digest, hashlib.sha256(data).hexdigest())
    return data


def stream_verified(
    source: RunSource, digest: str, sink: Callable[[bytes], object] | None = None
) -> int:
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
        raise CorruptObjectError(
            f"object {digest[:16]}… is corrupt: its bytes hash to {actual[:16]}…"
        )
