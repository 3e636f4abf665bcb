"""Which bulk objects a verifier re-hashes when it does not re-hash them all.

The sample is drawn from local randomness mixed with the signed root: the operator cannot
predict it when it stores the objects, nor steer it afterwards (nothing the source says -- not
even an object's size -- enters the draw), and two runs of the verifier draw differently, so
repeated checks cover a run over time. The signed root is mixed in so the draw is bound to the
log it checks (a report names the root its sample was drawn under).
"""

from __future__ import annotations

import hashlib
import os
import random


def sample(signed_root: bytes, population: list[int], k: int, label: str) -> list[int]:
    """``k`` members of ``population`` (all of it when it has at most ``k``), sorted."""
    if k >= len(population):
        return sorted(population)
    seed = hashlib.sha256(
        b"veritrain/verify-sample/" + label.encode() + b"/" + signed_root + os.urandom(32)
    ).digest()
    return sorted(random.Random(seed).sample(population, k))
