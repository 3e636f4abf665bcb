"""Checks 1–3: the signed tree head, the entries (their hash chain, their typed payloads and
the run's layout), and inclusion proofs (RFC 9162 §2.1, C2SP tlog-checkpoint / signed-note).
"""

from __future__ import annotations

from dataclasses import dataclass

from attestation.errors import AttestationError
from attestation.keys import PublicKey
from ledger.audit import audit_run_log
from ledger.errors import LedgerError, VerificationError
from ledger.merkle import verify_consistency, verify_inclusion
from ledger.tlog_checkpoint import Checkpoint, verify_checkpoint
from records import FIRST_STEP_INDEX, KIND_FINAL, KIND_OUTER_STEP, Genesis, kinds_at
from veritrain.audit.verify.report import Report
from veritrain.audit.verify.seen_heads import SeenHeads, Sighting
from veritrain.errors import SourceError
from veritrain.sources import RunSource
from veritrain.sources.recorded_run import RecordedRun


@dataclass(frozen=True)
class TrustedHead:
    checkpoint: Checkpoint
    vkey: str
    """The log key the head verified under."""


def check_tree_head(
    report: Report,
    run: RecordedRun,
    note: str | None,
    *,
    pinned_vkey: str | None,
    seen_heads: SeenHeads | None,
    source: RunSource,
) -> TrustedHead | None:
    """1. The latest tree head is signed by the run's log key, for this run's log, and is
    consistent with what this verifier saw of the run from this source before."""
    result = report.check(1)
    result.checked = 1
    if note is None:
        result.fail("the source serves no signed tree head")
        return None
    genesis = run.genesis_entry
    genesis_vkey = (
        genesis.record.keys.log
        if genesis is not None and isinstance(genesis.record, Genesis)
        else None
    )
    # 1a. Which key to trust: one pinned on the command line, else the one the genesis names
    #     (trust on first use; a returning verifier insists it did not change, 1c).
    suffix = f"/runs/{run.run_id}"
    vkey = pinned_vkey or genesis_vkey
    if not isinstance(vkey, str):
        result.fail("the genesis entry names no log key and none was given with --vkey", index=0)
        return None
    try:
        name = PublicKey.from_vkey(vkey).name
    except AttestationError as exc:
        result.fail(f"log key {vkey!r} is malformed: {exc}")
        return None
    if not name.endswith(suffix):
        result.fail(f"expected a log key named like the run's origin (…{suffix}), got {name!r}")
        return None
    if pinned_vkey and genesis_vkey != pinned_vkey:
        result.fail(
            f"the genesis names log key {genesis_vkey}, but --vkey pinned {pinned_vkey}", index=0
        )
    # 1b. The signature, under that key only.
    try:
        checkpoint = verify_checkpoint(note, [vkey], origin=name)
    except (LedgerError, AttestationError) as exc:
        result.fail(f"signed tree head does not verify under {vkey}: {exc}")
        return None
    result.notes.append(f"size {checkpoint.size}, signed by {name}")
    # The run's identity is its origin and log key (item 8, docs/auditing.md "What remains
    # trusted"): say whether the verifier pinned it or took it from the genesis.
    result.notes.append(
        f"log origin {checkpoint.origin}: key pinned with --vkey"
        if pinned_vkey
        else f"log origin {checkpoint.origin}: key as the genesis names it (trusted on first "
        "use: compare it with the run's announcement, or pin it with --vkey)"
    )
    head = TrustedHead(checkpoint, vkey)
    # 1c. A returning verifier: same origin and key, never smaller, consistent, still finished.
    seen = seen_heads.last_seen(run.run_id, source.description) if seen_heads else None
    if seen is not None:
        _check_against_seen(report, run, head, seen, source)
    return head


def _check_against_seen(
    report: Report, run: RecordedRun, head: TrustedHead, seen: Sighting, source: RunSource
) -> None:
    result = report.check(1)
    checkpoint = head.checkpoint
    if checkpoint.origin != seen.origin:
        result.fail(
            "the run's log origin changed since this verifier "
            f"last checked it from {source.description}: "
            f"expected {seen.origin!r}, got {checkpoint.origin!r} "
            "(the log was rewritten under another origin)",
            index=0,
        )
        return
    if head.vkey != seen.vkey:
        result.fail(
            "the log key changed since this verifier last checked "
            f"the run: expected {seen.vkey}, got {head.vkey} "
            "(the log was re-signed with another key)",
            index=0,
        )
        return
    if checkpoint.size < seen.size:
        result.fail(
            f"the log shrank since this verifier last checked it: signed size {checkpoint.size}, "
            f"previously {seen.size}: entries "
            f"{checkpoint.size}..{seen.size - 1} were removed (rolled back)"
        )
        return
    if checkpoint.size > seen.size:
        try:
            proof = source.consistency_proof(run.run_id, seen.size, checkpoint.size)
            verify_consistency(
                seen.size,
                checkpoint.size,
                proof,
                bytes.fromhex(seen.root_hash),
                checkpoint.root_hash,
            )
        except (LedgerError, SourceError) as exc:
            result.fail(f"the log is not an extension of the one seen at size {seen.size}: {exc}")
            return
    elif bytes.fromhex(seen.root_hash) != checkpoint.root_hash:
        result.fail(f"a different log of the same size {seen.size} was seen before (a fork)")
        return
    if seen.finished and run.final_entry is None:
        result.fail(
            f"this verifier saw the run finished (a {KIND_FINAL} entry within size {seen.size}); "
            f"the log now has {len(run.entries)} entries and no {KIND_FINAL} (rolled back)"
        )
        return
    result.notes.append(f"consistent with the head seen before at size {seen.size}")


def check_chain(
    report: Report, run: RecordedRun, note: str | None, head: TrustedHead | None
) -> None:
    """2. Every entry is a canonical envelope in its place, ``prev`` links each to its
    predecessor's leaf hash, the leaves hash to the signed root with the signed size, every
    payload reads as its kind's typed record, ``recorded_at`` only moves forward, and the log
    has the run's layout: genesis, data manifest, outer steps 0, 1, 2... in order, then at most
    a final entry."""
    result = report.check(2)
    result.checked = len(run.entries)
    if head is None or note is None:
        result.fail("not checked against a root: no verified tree head")
    else:
        try:
            summary = audit_run_log(
                run.run_id,
                [e.body for e in run.entries],
                note,
                [head.vkey],
                origin=head.checkpoint.origin,
            )
            result.notes.append(f"{summary.size} entries, root {summary.root_hash.hex()[:16]}…")
        except VerificationError as exc:
            result.fail(str(exc), index=exc.index, step=run.step_of(exc.index))
    for entry in run.entries:
        if entry.problem is not None:
            result.fail(entry.problem, index=entry.index)
    _check_times(report, run)
    _check_layout(report, run)


def _check_times(report: Report, run: RecordedRun) -> None:
    result = report.check(2)
    previous = None
    for entry in run.entries:
        if entry.recorded_at is None:
            result.fail(
                "recorded_at is not an RFC 3339 UTC time", index=entry.index, step=entry.step
            )
            continue
        if previous is not None and entry.recorded_at <= previous:
            result.fail(
                f"recorded_at went backwards: {entry.recorded_at.isoformat()} "
                "is not after the previous entry's "
                f"{previous.isoformat()}",
                index=entry.index,
                step=entry.step,
            )
        previous = entry.recorded_at


def _check_layout(report: Report, run: RecordedRun) -> None:
    result = report.check(2)
    for entry in run.entries:
        kinds = kinds_at(entry.index, last=entry.index == len(run.entries) - 1)
        if entry.kind not in kinds:
            result.fail(
                f"expected a {kinds[0]} entry here, got {entry.kind or 'no kind'!r}",
                index=entry.index,
            )
            continue
        if entry.kind == KIND_OUTER_STEP and entry.record is not None:
            step = entry.index - FIRST_STEP_INDEX
            if entry.step != step:
                result.fail(
                    f"expected outer step {step} at entry {entry.index} "
                    "(steps are recorded once each, in order), "
                    f"got step {entry.step}",
                    index=entry.index,
                    step=entry.step,
                )


def check_inclusion(
    report: Report, run: RecordedRun, source: RunSource, head: TrustedHead | None
) -> None:
    """3. The log's own inclusion proof of every entry verifies against the signed root."""
    result = report.check(3)
    if head is None:
        result.fail("not checked: no verified tree head")
        return
    checkpoint = head.checkpoint
    entries = run.entries[: checkpoint.size]
    try:
        proofs = source.inclusion_proofs(run.run_id, checkpoint.size)
        for entry, proof in zip(entries, proofs, strict=False):
            result.checked += 1
            try:
                verify_inclusion(
                    entry.leaf, entry.index, checkpoint.size, proof, checkpoint.root_hash
                )
            except VerificationError as exc:
                result.fail(
                    f"inclusion proof does not verify: {exc}", index=entry.index, step=entry.step
                )
    except (LedgerError, SourceError) as exc:
        result.fail(f"the log serves no inclusion proofs at size {checkpoint.size}: {exc}")


def remember(
    seen_heads: SeenHeads | None, run: RecordedRun, source: RunSource, head: TrustedHead | None
) -> None:
    if seen_heads is None or head is None:
        return
    checkpoint = head.checkpoint
    seen_heads.remember(
        Sighting(
            run_id=run.run_id,
            source=source.description,
            origin=checkpoint.origin,
            vkey=head.vkey,
            size=checkpoint.size,
            root_hash=checkpoint.root_hash.hex(),
            finished=run.final_entry is not None,
        )
    )
