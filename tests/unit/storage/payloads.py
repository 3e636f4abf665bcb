"""Deterministic test payloads that are generated as they stream, never held in memory."""

from __future__ import annotations

import hashlib
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHUNK = 1 << 20


def deterministic_chunks(total: int, seed: int = 0) -> Iterator[bytes]:
    """``total`` pseudo-random bytes in 1 MiB chunks; the same (total, seed) always gives the
    same bytes. One random block is generated, and each chunk starts with its own index so
    that no two chunks are equal (a store that mixed parts up would be caught)."""
    block = random.Random(seed).randbytes(CHUNK)
    for index, offset in enumerate(range(0, total, CHUNK)):
        chunk = index.to_bytes(8, "big") + block[8:]
        yield chunk[: min(CHUNK, total - offset)]


GiB = 1 << 30


def payload_digest(size: int, *, seed: int) -> str:
    """SHA-256 of ``deterministic_chunks(size, seed=seed)``, computed without holding it."""
    hasher = hashlib.sha256()
    for chunk in deterministic_chunks(size, seed=seed):
        hasher.update(chunk)
    return hasher.hexdigest()


def local_or_s3_store(request: Any, tmp_path: Path) -> Iterator[str]:
    """For a fixture parametrised by back-end: a local store URL (its big files removed
    afterwards: pytest keeps recent tmp dirs) for "local", else a fresh SeaweedFS bucket."""
    if request.param == "local":
        yield f"file://{tmp_path / 'objects'}"
        shutil.rmtree(tmp_path / "objects", ignore_errors=True)
        return
    yield request.getfixturevalue("s3_store_url")
