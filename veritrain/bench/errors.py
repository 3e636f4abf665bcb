"""Errors of the benchmarks: a measurement that could not be taken as asked."""

from __future__ import annotations

from veritrain.errors import VeritrainError


class BenchError(VeritrainError):
    """A benchmark could not run (a server did not start, a run failed, a link misbehaved)."""
