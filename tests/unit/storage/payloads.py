"""Deterministic test payloads that are generated as they stream, never held in memory."""

from __future__ import annotations

import random
from collections.abc import Iterator

CHUNK = 1 << 20


def deterministic_chunks(total: int, seed: int = 0) -> Iterator[bytes]:
    """``total`` pseudo-random bytes in 1 MiB chunks; the same (total, seed) always gives the
    same bytes. One random block is generated, and each chunk starts with its own index so
    that no two chunks are equal (a store that mixed parts up would be caught)."""
    block = random.Random(seed).randbytes(CHUNK)
    for index, offset in enumerate(range(0, total, CHUNK)):
        chunk = index.to_bytes(8, "big") + block[8:]
        yield chunk[: min(CHUNK, total - offset)]
