"""The one way a check says "the object disagrees with the log": ``expected X, got Y``."""

from __future__ import annotations


class Mismatch(ValueError):
    """An object says something other than what the log (or a recomputation) says."""


def expect(what: str, expected: object, actual: object) -> None:
    if expected != actual:
        raise Mismatch(f"{what}: expected {expected!r}, got {actual!r}")
