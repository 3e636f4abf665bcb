"""Re-checking a recorded run: ``verify_run`` over a ``RunSource`` (database + store, or the
public HTTP API)."""

from veritrain.audit.verify.report import Report
from veritrain.audit.verify.seen_heads import SeenHeads
from veritrain.audit.verify.verifier import verify_run

__all__ = ["Report", "SeenHeads", "verify_run"]
