"""Check 1, continued: who vouched for the log (C2SP tlog-witness cosignatures).

With ``--witness VKEY ... --quorum K`` the verified head must be cosigned by K distinct given
witnesses, on a checkpoint at least as large as the verified one and consistent with it
(veritrain/audit/verify/witness_quorum.py): a log rewritten since those witnesses saw it fails, even
for a verifier that never looked before.

A cosignature is a statement about the past, so a log rolled back to a head the witnesses once
cosigned still carries a quorum. With ``--witness VKEY@URL`` the verifier also asks the witness
itself, not the log server, what it holds now (veritrain/witnesses/views.py): a witness holding a
larger or another tree fails the check, and the quorum counts only witnesses that still hold
the served head (veritrain/audit/verify/witness_freshness.py). A witness given without a URL counts
on its cosignature alone, and the report says so.

Without the flags, the report names the witnesses whose cosignature lines the head carries --
unverified, since the verifier was given no witness keys to check them with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import httpx

from ledger.errors import LedgerError, VerificationError
from ledger.note import open_note
from veritrain.audit.verify.log_checks import TrustedHead
from veritrain.audit.verify.report import CheckResult, Report
from veritrain.audit.verify.witness_freshness import ViewVerdict, judge_view
from veritrain.audit.verify.witness_quorum import QuorumResult, check_quorum
from veritrain.errors import SourceError
from veritrain.sources import RunSource
from veritrain.sources.recorded_run import RecordedRun
from veritrain.witnesses.endpoints import WitnessEndpoint, parse_witness_option
from veritrain.witnesses.views import WitnessView, WitnessViewError, fetch_origins, fetch_view


def check_witnesses(
    report: Report,
    run: RecordedRun,
    note: str | None,
    head: TrustedHead | None,
    source: RunSource,
    *,
    witnesses: Sequence[str],
    quorum: int,
    origin_pinned: bool = False,
) -> tuple[str, ...]:
    """1d. The witness quorum (or, without witnesses given, who cosigned). ``witnesses`` are
    ``VKEY`` or ``VKEY@URL`` items; a witness given a URL counts only if it still holds the
    served head (1e). Returns the names of the witnesses that count (empty when none given)."""
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
        given = [parse_witness_option(item) for item in witnesses]
        verdict = check_quorum(
            note,
            head.vkey,
            [vkey for vkey, _ in given],
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
    endpoints = [endpoint for _, endpoint in given if endpoint is not None]
    unasked = sorted({_name(vkey) for vkey, endpoint in given if endpoint is None})
    if not endpoints:
        result.notes.append(f"witnessed: {verdict.detail}")
        result.notes.append(_UNASKED.format(", ".join(unasked)))
        return verdict.cosigners
    counted = _check_current(result, verdict, head, endpoints, unasked, consistency)
    _check_one_origin(result, run.run_id, head, endpoints, origin_pinned=origin_pinned)
    return counted


_UNASKED = (
    "not asked what they hold now: {} (give --witness VKEY@URL: a rollback to a head a witness "
    "once cosigned passes otherwise)"
)


def _check_current(
    result: CheckResult,
    verdict: QuorumResult,
    head: TrustedHead,
    endpoints: list[WitnessEndpoint],
    unasked: list[str],
    consistency: Callable[[int, int], Sequence[bytes]],
) -> tuple[str, ...]:
    """1e. Ask each witness given with a URL what it holds now, from the witness itself."""
    checkpoint = head.checkpoint
    verdicts: list[ViewVerdict] = []
    with httpx.Client(follow_redirects=False) as client:
        for endpoint in endpoints:
            view: WitnessView | WitnessViewError
            try:
                view = fetch_view(endpoint, checkpoint.origin, [head.vkey], client=client)
            except WitnessViewError as exc:
                view = exc
            verdicts.append(
                judge_view(view, endpoint.name, checkpoint.size, checkpoint.root_hash, consistency)
            )
    for judged in verdicts:
        if judged.failure is not None:
            result.fail(f"witness {judged.failure}")
        result.notes.append(judged.note)
    # The quorum counts a witness asked at a URL only if it holds the served head now.
    stale = {v.witness for v in verdicts if not v.current}
    counted = tuple(name for name in verdict.cosigners if name not in stale)
    if len(counted) < verdict.quorum:
        result.fail(
            f"witness quorum not met: expected {verdict.quorum} witnesses that cosigned size "
            f"{checkpoint.size} and still hold it, got {len(counted)} "
            f"({', '.join(counted) or 'none'})"
        )
        return counted
    result.notes.append(
        f"witnessed: {len(counted)} witnesses cosigned size {checkpoint.size} and "
        f"{len(verdicts) - len(stale)} of them hold it now (quorum {verdict.quorum}): "
        f"{', '.join(counted)}"
    )
    if unasked:
        result.notes.append(_UNASKED.format(", ".join(unasked)))
    return counted


def _check_one_origin(
    result: CheckResult,
    run_id: str,
    head: TrustedHead,
    endpoints: list[WitnessEndpoint],
    *,
    origin_pinned: bool,
) -> None:
    """1f. One run id, one log: does a witness also cosign another origin that claims this run
    (a split view: a second history under another origin prefix, which witnesses accept as a
    new log)? Without ``--vkey`` that is a failure -- nothing tells the verifier which log is
    the run; with the log key pinned it is named in a note."""
    verified = head.checkpoint.origin
    others: list[str] = []
    asked: list[str] = []
    with httpx.Client(follow_redirects=False) as client:
        for endpoint in endpoints:
            try:
                origins = fetch_origins(endpoint, client=client)
            except WitnessViewError as exc:
                result.notes.append(f"{endpoint.name}: its list of logs was not read: {exc}")
                continue
            asked.append(endpoint.name)
            others += [
                f"{origin} (size {size}, cosigned by {endpoint.name})"
                for origin, size in origins
                if origin != verified and origin.endswith(f"/runs/{run_id}")
            ]
    if not others:
        if asked:
            result.notes.append(
                f"one log for run {run_id!r}: {', '.join(asked)} cosign no other origin for it"
            )
        return
    line = (
        f"another log claims run {run_id!r}: {'; '.join(others)}; this one is {verified} "
        "(a split view under another origin, or another operator's run of the same name)"
    )
    if origin_pinned:
        result.notes.append(f"{line}; the pinned --vkey says which log is the run")
    else:
        result.fail(f"{line}: pin the run's log key with --vkey, from its publisher")


def _name(vkey: str) -> str:
    return vkey.split("+", 1)[0]


def _cosignature_names(note: str, head: TrustedHead) -> list[str]:
    try:
        _, signatures = open_note(note)
    except VerificationError:
        return []
    log_name = head.checkpoint.origin
    return sorted({s.name for s in signatures if s.name != log_name})
