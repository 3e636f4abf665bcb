"""Checks 1–3: the signed tree head, the entries and their hash chain, inclusion proofs
(RFC 9162 §2.1, C2SP tlog-checkpoint / signed-note)."""

from __future__ import annotations

from dataclasses import dataclass

from attestation.errors import AttestationError
from attestation.keys import PublicKey
from ledger.audit import audit_run_log
from ledger.checkpoint import Checkpoint, verify_checkpoint
from ledger.errors import LedgerError, VerificationError
from ledger.merkle import verify_consistency, verify_inclusion
from veritrain.verify.report import Report
from veritrain.verify.source import RunSource, SourceError
from veritrain.verify.view import RunView
from veritrain.verify.witness import Sighting, Witness


@dataclass(frozen=True)
class TrustedHead:
    checkpoint: Checkpoint
    vkey: str
    """The log key the head verified under."""


def check_tree_head(
    report: Report, view: RunView, note: str, *, pinned_vkey: str | None, witness: Witness | None, source: RunSource
) -> TrustedHead | None:
    """1. The latest tree head is signed by the run's log key, for this run's log, and is
    consistent with what this verifier saw before."""
    result = report.check(1)
    result.checked = 1
    genesis_vkey = view.genesis.get("keys", {}).get("log")
    # 1a. Which key to trust: one pinned on the command line, else the one this verifier
    #     saw before, else the one the genesis names (trust on first use).
    suffix = f"/runs/{view.run_id}"
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
    seen = witness.last_seen(name) if witness else None
    if seen is not None and seen.vkey != vkey:
        result.fail(
            f"the log key changed since this verifier last checked the run: expected {seen.vkey}, got {vkey} "
            "(the log was re-signed with another key)",
            index=0,
        )
        return None
    if pinned_vkey and genesis_vkey != pinned_vkey:
        result.fail(f"the genesis names log key {genesis_vkey}, but --vkey pinned {pinned_vkey}", index=0)
    # 1b. The signature, under that key only.
    try:
        checkpoint = verify_checkpoint(note, [vkey], origin=name)
    except (LedgerError, AttestationError) as exc:
        result.fail(f"signed tree head does not verify under {vkey}: {exc}")
        return None
    result.notes.append(f"size {checkpoint.size}, signed by {name}")
    # 1c. Never smaller than, and consistent with, the head seen last time.
    if seen is not None:
        if checkpoint.size < seen.size:
            result.fail(
                f"the log shrank since this verifier last checked it: signed size {checkpoint.size}, "
                f"previously {seen.size} (rolled back)"
            )
            return TrustedHead(checkpoint, vkey)
        if checkpoint.size > seen.size:
            try:
                proof = source.consistency_proof(view.run_id, seen.size, checkpoint.size)
                verify_consistency(seen.size, checkpoint.size, proof, bytes.fromhex(seen.root_hash), checkpoint.root_hash)
            except (LedgerError, VerificationError) as exc:
                result.fail(f"the log is not an extension of the one seen at size {seen.size}: {exc}")
        elif bytes.fromhex(seen.root_hash) != checkpoint.root_hash:
            result.fail(f"a different log of the same size {seen.size} was seen before (a fork)")
        result.notes.append(f"consistent with the head seen before at size {seen.size}")
    return TrustedHead(checkpoint, vkey)


def check_chain(report: Report, view: RunView, note: str, head: TrustedHead | None) -> bool:
    """2. Every entry is a canonical envelope in its place, ``prev`` links each to its
    predecessor's leaf hash, and the leaves hash to the signed root with the signed size."""
    result = report.check(2)
    result.checked = len(view.entries)
    if head is None:
        result.fail("not checked: no verified tree head to check the entries against")
        return False
    audited = True
    try:
        summary = audit_run_log(
            view.run_id, [e.body for e in view.entries], note, [head.vkey], origin=head.checkpoint.origin
        )
        result.notes.append(f"{summary.size} entries, root {summary.root_hash.hex()[:16]}…")
    except VerificationError as exc:
        result.fail(str(exc), index=exc.index, step=view.step_of(exc.index))
        audited = False
    return check_step_sequence(report, view) and audited


def check_step_sequence(report: Report, view: RunView) -> bool:
    """2b. Outer steps are recorded once each, in order, from 0 without a gap (a resumed run
    continues its chain; it never skips or repeats a step)."""
    result = report.check(2)
    expected = 0
    for entry in view.outer_steps:
        step = entry.step
        if step is None:
            result.fail("outer_step entry without a step number", index=entry.index)
        elif step > expected:
            missing = ", ".join(str(s) for s in range(expected, step))
            result.fail(f"outer step {missing} is missing before this entry", index=entry.index, step=expected)
        elif step < expected:
            result.fail(f"outer step {step} is recorded again or out of order", index=entry.index, step=step)
        expected = max(expected, (step or 0) + 1)
    return result.passed


def check_inclusion(report: Report, view: RunView, source: RunSource, head: TrustedHead | None) -> None:
    """3. The log's own inclusion proof of every entry verifies against the signed root."""
    result = report.check(3)
    if head is None:
        result.fail("not checked: no verified tree head")
        return
    checkpoint = head.checkpoint
    entries = view.entries[: checkpoint.size]
    try:
        proofs = source.inclusion_proofs(view.run_id, checkpoint.size)
        for entry, proof in zip(entries, proofs, strict=False):
            result.checked += 1
            try:
                verify_inclusion(entry.leaf, entry.index, checkpoint.size, proof, checkpoint.root_hash)
            except VerificationError as exc:
                result.fail(f"inclusion proof does not verify: {exc}", index=entry.index, step=entry.step)
    except (LedgerError, SourceError) as exc:
        result.fail(f"the log serves no inclusion proofs at size {checkpoint.size}: {exc}")


def remember(witness: Witness | None, head: TrustedHead | None) -> None:
    if witness is None or head is None:
        return
    checkpoint = head.checkpoint
    witness.remember(
        Sighting(origin=checkpoint.origin, vkey=head.vkey, size=checkpoint.size, root_hash=checkpoint.root_hash.hex())
    )
