"""Re-checking a recorded run: ``verify_run`` over a ``RunSource`` (database + store, or the
public HTTP API)."""

from veritrain.verify.report import Report
from veritrain.verify.seen_heads import SeenHeads
from veritrain.verify.verifier import verify_run

__all__ = ["Report", "SeenHeads", "verify_run"]
