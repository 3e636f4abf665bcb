"""Witness quorum: did K independent witnesses vouch for the log a verifier just checked?

A C2SP ``cosignature/v1`` (tlog-cosignature) says "as of this time, this is the largest tree
consistent with everything I saw from this log". If K witnesses, each run by someone other
than the operator, cosigned a checkpoint that is at least as large as the tree the verifier
verified and consistent with it, then the operator cannot show this verifier a history that
those witnesses were not shown: a rewritten log (a new log key, or the same key on another
history) or a rolled-back one fails here even when everything the server returns is
self-consistent.

Pure: the caller passes the cosigned note and a way to fetch a consistency proof (from the
API or the database) and gets a :class:`QuorumResult`; it raises only for arguments that
make no sense (``quorum < 1``, a key that is not a witness key).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from attestation.keys import PublicKey
from ledger.cosignature import Cosignature, cosigner_key, verify_cosignature
from ledger.errors import VerificationError
from ledger.merkle import verify_consistency
from ledger.note import open_note
from ledger.tlog_checkpoint import verify_checkpoint


@dataclass(frozen=True)
class QuorumResult:
    """The verdict, and which of the given witnesses cosigned."""

    ok: bool
    """At least ``quorum`` distinct given witnesses cosigned a checkpoint at least as large
    as the verified tree and consistent with it."""
    quorum: int
    checkpoint_size: int | None
    """Size of the cosigned checkpoint (None when its log signature did not verify)."""
    cosigners: tuple[str, ...]
    """Names of the given witnesses whose cosignature verified, sorted."""
    failures: tuple[str, ...]
    """One line per given witness whose line on the note did not verify."""
    detail: str
    """One line for a person: why it passed or failed."""


def check_quorum(
    note_text: str,
    log_vkey: str,
    witness_vkeys: Sequence[str],
    quorum: int,
    verified_size: int,
    verified_root: bytes,
    consistency: Callable[[int, int], Sequence[bytes]],
) -> QuorumResult:
    """Check that ``quorum`` distinct witnesses among ``witness_vkeys`` (C2SP vkeys of type
    0x04) cosigned the checkpoint ``note_text``, that the log key ``log_vkey`` signed it, and
    that it extends the verified tree (``verified_size``, ``verified_root``);
    ``consistency(old, new)`` returns the RFC 9162 consistency proof between two sizes."""
    if quorum < 1:
        raise ValueError(f"quorum: expected at least 1, got {quorum}")
    witnesses = _distinct(witness_vkeys)
    # 1. The checkpoint must be the log's: its log signature verifies under log_vkey.
    try:
        checkpoint = verify_checkpoint(note_text, [log_vkey])
    except VerificationError as exc:
        return _failed(
            quorum, None, (), (), f"the cosigned checkpoint is not signed by the log key: {exc}"
        )
    text, signatures = open_note(note_text)
    # 2. Each given witness's cosignature on it, verified over the exact note text.
    cosigners: list[str] = []
    failures: list[str] = []
    for key in witnesses:
        lines = [s for s in signatures if (s.name, s.key_id) == (key.name, key.key_id)]
        for signature in lines:
            try:
                verify_cosignature(text, Cosignature.from_note_signature(signature), key)
            except VerificationError as exc:
                failures.append(f"{key.name}: {exc}")
                break
        else:
            if lines:
                cosigners.append(key.name)
    names, bad = tuple(sorted(cosigners)), tuple(failures)
    size = checkpoint.size
    # 3. The cosigned tree must contain the verified one: as large, and consistent with it.
    if size < verified_size:
        return _failed(
            quorum,
            size,
            names,
            bad,
            f"the cosigned checkpoint has size {size}, smaller than the verified {verified_size}",
        )
    try:
        if verified_size == size:
            if checkpoint.root_hash != verified_root:
                raise VerificationError(
                    f"expected root {verified_root.hex()} at size "
                    f"{size}, got {checkpoint.root_hash.hex()}"
                )
        elif verified_size > 0:
            proof = consistency(verified_size, size)
            verify_consistency(verified_size, size, proof, verified_root, checkpoint.root_hash)
    except VerificationError as exc:
        return _failed(
            quorum,
            size,
            names,
            bad,
            f"the cosigned checkpoint (size {size}) does not extend the verified tree: {exc}",
        )
    # 4. C2SP signed-note: a known key's signature that fails rejects the whole note.
    if bad:
        return _failed(
            quorum, size, names, bad, f"a given witness's cosignature does not verify: {bad[0]}"
        )
    # 5. Enough distinct witnesses.
    if len(names) < quorum:
        who = ", ".join(names) if names else "none of them"
        return _failed(
            quorum,
            size,
            names,
            bad,
            f"expected cosignatures from {quorum} of the {len(witnesses)} given witnesses "
            f"on size {size}, got {len(names)} ({who})",
        )
    return QuorumResult(
        ok=True,
        quorum=quorum,
        checkpoint_size=size,
        cosigners=names,
        failures=bad,
        detail=(
            f"{len(names)} of {len(witnesses)} witnesses cosigned size {size} "
            f"(quorum {quorum}): {', '.join(names)}"
        ),
    )


def _distinct(witness_vkeys: Sequence[str]) -> list[PublicKey]:
    """The given witness keys, one per Ed25519 public key: cosignature/v1 does not sign the
    witness's name, so one key listed under two names is one witness, not two."""
    keys: dict[bytes, PublicKey] = {}
    for vkey in witness_vkeys:
        try:
            key = cosigner_key(vkey)
        except VerificationError as exc:
            raise ValueError(str(exc)) from None
        keys.setdefault(key.raw, key)
    return list(keys.values())


def _failed(
    quorum: int,
    size: int | None,
    cosigners: tuple[str, ...],
    failures: tuple[str, ...],
    detail: str,
) -> QuorumResult:
    return QuorumResult(
        ok=False,
        quorum=quorum,
        checkpoint_size=size,
        cosigners=cosigners,
        failures=failures,
        detail=detail,
    )
