"""Is the served head still the newest that the given witnesses hold? (check 1, continued)

A cosignature says "this was the largest tree I had seen *at that time*". An operator that
rolls its log back to a head the witnesses once cosigned can serve that head with its old
cosignatures, and the quorum check (veritrain/audit/verify/witness_quorum.py) passes. What it cannot
do is make a witness forget: asked directly (veritrain/witnesses/views.py, the tlog-witness
monitoring view), a witness that has cosigned a larger tree since shows it, signed by the log
key itself. One such checkpoint is proof that the served head is not the newest: it fails the
check whatever the quorum.

Pure: the caller fetches the views and passes a way to fetch a consistency proof.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from ledger.errors import LedgerError
from ledger.merkle import verify_consistency
from veritrain.errors import SourceError
from veritrain.witnesses.views import WitnessView, WitnessViewError


@dataclass(frozen=True)
class ViewVerdict:
    """What one witness's current view says about the served head."""

    witness: str
    current: bool
    """The witness holds exactly the served head now."""
    failure: str | None
    """Proof that the served head is stale or forked (fails the check)."""
    note: str
    """One line for a person."""


def judge_view(
    view: WitnessView | WitnessViewError,
    witness: str,
    served_size: int,
    served_root: bytes,
    consistency: Callable[[int, int], Sequence[bytes]],
) -> ViewVerdict:
    """Compare one witness's current view (or why it could not be read) with the served head
    (``served_size``, ``served_root``); ``consistency(old, new)`` is the source's proof."""
    if isinstance(view, WitnessViewError):
        return ViewVerdict(witness, False, None, f"{witness}: current view not read: {view}")
    if view.checkpoint is None:
        return ViewVerdict(witness, False, None, f"{witness} says it never cosigned this log (404)")
    size, root = view.checkpoint.size, view.checkpoint.root_hash
    when = _utc(view.timestamp)
    # 1. Larger: the log signed a newer tree than the one served (a rollback, or it grew).
    if size > served_size:
        return ViewVerdict(
            witness,
            False,
            f"{witness} now holds size {size} of this log (log-signed, cosigned {when}), newer "
            f"than the served head of size {served_size}: the log was rolled back to an older "
            "head, or it grew while this verify ran (run it again)",
            f"{witness} holds size {size}",
        )
    # 2. Same size: the same tree, or a fork.
    if size == served_size:
        if root != served_root:
            return ViewVerdict(
                witness,
                False,
                f"{witness} holds another tree of size {size} (root {root.hex()}, served "
                f"{served_root.hex()}): the log forked",
                f"{witness} holds a fork",
            )
        return ViewVerdict(witness, True, None, f"{witness} holds this head now ({when})")
    # 3. Smaller: the witness lags; what it holds must be a prefix of the served tree.
    try:
        if size > 0:
            proof = consistency(size, served_size)
            verify_consistency(size, served_size, proof, root, served_root)
    except (LedgerError, SourceError) as exc:
        return ViewVerdict(
            witness,
            False,
            f"{witness} holds size {size}, which the served head does not extend: {exc}",
            f"{witness} holds a fork",
        )
    return ViewVerdict(witness, False, None, f"{witness} lags at size {size} ({when})")


def _utc(timestamp: int | None) -> str:
    if timestamp is None:
        return "at an unknown time"
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
