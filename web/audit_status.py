"""The verification status the run page shows: the server's own audit of the run's log.

It runs ``Ledger.audit_run`` (every entry's envelope and hash-chain link, the Merkle root
against the latest signed tree head, that head's signature by the run's enrolled log key,
every stored tree node and tree head, the metric rows against their entries). A log only
grows and every size has exactly one signed head, so the result for a given
(run, tree size) never changes: it is computed once per size and cached.

It is a convenience, not a proof: a reader who does not trust this server runs
``veritrain verify --api <url> <run>``, which re-does these checks (and the attestation
checks) on the data the API serves; the page says so next to the status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from ledger.errors import VerificationError
from ledger.service import Ledger
from web.size_cache import SizeKeyedCache

CACHE_RUNS = 256
"""How many (run, size) results are kept."""


@dataclass(frozen=True)
class RunStatus:
    """The outcome of the server's audit of one run at one tree size."""

    run_id: str
    size: int
    ok: bool
    message: str
    """What was checked, or what failed."""
    failed_index: int | None = None
    """The first bad entry, when the failure is tied to one."""
    root_hash: str | None = None
    kinds: dict[str, int] = field(default_factory=dict)
    checked_at: datetime = field(default_factory=lambda: datetime.now(UTC))


class StatusCache:
    """Audit results by (run, tree size), least recently used evicted."""

    def __init__(self, capacity: int = CACHE_RUNS) -> None:
        self._results: SizeKeyedCache[RunStatus] = SizeKeyedCache(capacity)

    def status(self, ledger: Ledger, run_id: str, size: int) -> RunStatus:
        """The audit of ``run_id`` whose log has ``size`` entries, computed once per size.
        (If an append lands while it runs, the audit covers the larger log and says so.)"""
        return self._results.get((run_id, size), lambda: _audit(ledger, run_id, size))


def _audit(ledger: Ledger, run_id: str, size: int) -> RunStatus:
    try:
        summary = ledger.audit_run(run_id)
    except VerificationError as exc:
        return RunStatus(
            run_id=run_id, size=size, ok=False, message=str(exc), failed_index=exc.index
        )
    return RunStatus(
        run_id=run_id,
        size=summary.size,
        ok=True,
        message=(
            f"{summary.size} entries: envelopes, hash chain, Merkle root, signed tree head, "
            "stored tree nodes, every signed head and the metric rows all check out"
        ),
        root_hash=summary.root_hash.hex(),
        kinds=dict(summary.kinds),
    )
