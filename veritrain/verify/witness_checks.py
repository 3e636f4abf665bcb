"""Check 1, continued: who vouched for the log (C2SP tlog-witness cosignatures).

With ``--witness VKEY ... --quorum K`` the verified head must be cosigned by K distinct given
witnesses, on a checkpoint at least as large as the verified one and consistent with it
(veritrain/verify/witness_quorum.py): a log rewritten or rolled back since those witnesses saw
it fails, even for a verifier that never looked before. Without the flags, the report names
the witnesses whose cosignature lines the head carries -- unverified, since the verifier was
given no witness keys to check them with.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.errors import LedgerError, VerificationError
from ledger.note import open_note
from veritrain.errors import SourceError
from veritrain.recorded_run import RecordedRun
from veritrain.sources import RunSource
from veritrain.verify.log_checks import TrustedHead
from veritrain.verify.report import Report
from veritrain.verify.witness_quorum import check_quorum


def check_witnesses(
    report: Report,
    run: RecordedRun,
    note: str | None,
    head: TrustedHead | None,
    source: RunSource,
    *,
    witnesses: Sequence[str],
    quorum: int,
) -> tuple[str, ...]:
    """1d. The witness quorum (or, without witnesses given, who cosigned). Returns the names
    of the witnesses whose cosignatures verified (empty when none were given)."""
    result = report.check(1)
    if note is None or head is None:
        if witnesses:
            result.fail("the witness quorum was not checked: no verified tree head")
        return ()
    if not witnesses:
        names = _cosignature_names(note, head)
        result.notes.append(
            f"cosigned by {', '.join(names)} (not checked: pass --witness VKEY to require them)"
            if names
            else "no witness cosignatures on this head"
        )
        return ()

    def consistency(old: int, new: int) -> list[bytes]:
        return source.consistency_proof(run.run_id, old, new)

    try:
        verdict = check_quorum(
            note,
            head.vkey,
            witnesses,
            quorum,
            head.checkpoint.size,
            head.checkpoint.root_hash,
            consistency,
        )
    except (ValueError, LedgerError, SourceError) as exc:
        result.fail(f"witness quorum: {exc}")
        return ()
    if not verdict.ok:
        result.fail(f"witness quorum not met: {verdict.detail}")
        for failure in verdict.failures:
            result.fail(f"witness {failure}")
        return verdict.cosigners
    result.notes.append(f"witnessed: {verdict.detail}")
    return verdict.cosigners


def _cosignature_names(note: str, head: TrustedHead) -> list[str]:
    try:
        _, signatures = open_note(note)
    except VerificationError:
        return []
    log_name = head.checkpoint.origin
    return sorted({s.name for s in signatures if s.name != log_name})
