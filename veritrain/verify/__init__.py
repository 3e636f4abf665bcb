"""Re-checking a recorded run: ``verify_run`` over a ``RunSource`` (database + store, or the
public HTTP API)."""

from veritrain.verify.report import Report
from veritrain.verify.source import DirectSource, RunSource
from veritrain.verify.verifier import verify_run

__all__ = ["DirectSource", "Report", "RunSource", "verify_run"]
