"""The run-level audit: re-check a whole run's log against its signed tree head.

Pure (no database): ``Ledger.audit_run`` feeds it from the database, ``veritrain verify
--api`` from the HTTP API. It takes the ordered entry bodies, the latest signed checkpoint
and the log's verifier key(s), and either returns a summary or raises
:class:`VerificationError` whose ``index`` names the first entry that is wrong.

What an alteration looks like to it: a changed body either stops being a valid envelope, or
changes its leaf hash, which breaks the ``prev`` link of the next entry (the signed root then
tells whether the entry or its successor's ``prev`` was changed), or, for the last entry,
changes the root (reported at the last entry).
Deleted, inserted or reordered entries break the ``index`` sequence; extra or missing
entries disagree with the checkpoint's size; a forged checkpoint fails its signature.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from attestation.errors import AttestationError
from attestation.keys import PublicKey
from ledger import subtrees
from ledger.envelope import KIND_FINAL, KIND_GENESIS, parse_body
from ledger.errors import InvalidEntryError, VerificationError
from ledger.merkle import leaf_hash, root_hash
from ledger.note import open_note
from ledger.records import MetricPoint, SignedTreeHead
from ledger.subtrees import Node
from ledger.tlog_checkpoint import Checkpoint, parse_checkpoint, verify_checkpoint


@dataclass(frozen=True)
class AuditSummary:
    """What a successful audit established."""

    run_id: str
    origin: str
    size: int
    root_hash: bytes
    finished: bool
    """True when the log ends with a ``run.final`` entry."""
    kinds: dict[str, int]
    """Number of entries of each kind."""


def audit_run_log(
    run_id: str,
    bodies: Sequence[bytes],
    checkpoint_note: str,
    vkeys: Sequence[str],
    *,
    origin: str | None = None,
) -> AuditSummary:
    """Verify a run's entries (in index order) against its signed checkpoint.

    Only keys in ``vkeys`` named like the log's origin can sign for it. ``origin`` defaults
    to whatever the checkpoint says, provided it ends with ``/runs/<run_id>``."""
    # 1. The tree head: signed by the run's log key (named like the origin, so an attester
    #    key cannot sign tree heads), for this run's log.
    if origin is None:
        text, _ = open_note(checkpoint_note)
        origin = parse_checkpoint(text).origin  # a claim, trusted only once signed below
        if not origin.endswith(f"/runs/{run_id}"):
            raise VerificationError(
                f"checkpoint is for another log: expected an origin ending in /runs/{run_id}, "
                f"got {origin!r}"
            )
    checkpoint = verify_checkpoint(checkpoint_note, _log_keys(origin, vkeys), origin=origin)

    # 2. Every entry: a canonical envelope in the right place, linked to its predecessor.
    leaves: list[bytes] = []
    kinds: dict[str, int] = {}
    previous_kind: str | None = None
    for index, body in enumerate(bodies):
        if index >= checkpoint.size:
            raise VerificationError(
                f"entry {index}: not covered by the signed tree head, which has size "
                f"{checkpoint.size}, but {len(bodies)} entries were given",
                index=index,
            )
        try:
            envelope = parse_body(body)
        except InvalidEntryError as exc:
            raise VerificationError(f"entry {index}: {exc}", index=index) from None
        if envelope.index != index:
            raise VerificationError(
                f"entry {index}: expected index {index}, got {envelope.index} "
                "(an entry was deleted, inserted or moved)",
                index=index,
            )
        if envelope.run != run_id:
            raise VerificationError(
                f"entry {index}: expected run {run_id!r}, got {envelope.run!r}", index=index
            )
        if (envelope.kind == KIND_GENESIS) != (index == 0):
            expected = (
                f"kind {KIND_GENESIS!r}" if index == 0 else f"a kind other than {KIND_GENESIS!r}"
            )
            raise VerificationError(
                f"entry {index}: expected {expected}, got {envelope.kind!r}", index=index
            )
        if previous_kind == KIND_FINAL:
            raise VerificationError(
                f"entry {index}: expected nothing after {KIND_FINAL!r}, got {envelope.kind!r}",
                index=index,
            )
        expected_prev = leaves[-1].hex() if leaves else None
        if envelope.prev != expected_prev:
            if index == 0:
                raise VerificationError(
                    f"entry 0: expected prev null, got {envelope.prev!r}", index=0
                )
            assert envelope.prev is not None  # parse_body: a hex hash or null
            raise _broken_link(index, envelope.prev, bodies, checkpoint)
        leaves.append(leaf_hash(body))
        kinds[envelope.kind] = kinds.get(envelope.kind, 0) + 1
        previous_kind = envelope.kind

    # 3. The signed tree head covers exactly these entries and commits to them.
    if len(bodies) < checkpoint.size:
        raise VerificationError(
            f"entry {len(bodies)}: missing; the signed tree head covers {checkpoint.size} "
            f"entries, got {len(bodies)}",
            index=len(bodies),
        )
    computed = root_hash(leaves)
    if computed != checkpoint.root_hash:
        last = len(bodies) - 1
        raise VerificationError(
            f"entry {last}: root hash over entries 0..{last} is {computed.hex()}, but the "
            f"signed tree head says {checkpoint.root_hash.hex()}; the chain up to the last "
            "entry is intact, so the last entry was altered",
            index=last,
        )
    return AuditSummary(
        run_id=run_id,
        origin=checkpoint.origin,
        size=checkpoint.size,
        root_hash=computed,
        finished=previous_kind == KIND_FINAL,
        kinds=kinds,
    )


def _broken_link(
    index: int, recorded_prev: str, bodies: Sequence[bytes], checkpoint: Checkpoint
) -> VerificationError:
    """Entry ``index`` records a ``prev`` that is not the leaf hash of entry ``index-1``.

    Either entry ``index-1`` was altered (and ``prev`` still holds its original hash) or
    entry ``index`` was. The signed root tells which: put the recorded hash back in place of
    entry ``index-1``'s leaf; if the tree then matches the signed head, entry ``index-1`` is
    the altered one."""
    leaves = [leaf_hash(body) for body in bodies]
    actual = leaves[index - 1].hex()
    leaves[index - 1] = bytes.fromhex(recorded_prev)
    if len(leaves) == checkpoint.size and root_hash(leaves) == checkpoint.root_hash:
        return VerificationError(
            f"entry {index - 1}: altered: its leaf hash is {actual}, but entry {index} and the "
            f"signed tree head both commit to {recorded_prev}",
            index=index - 1,
        )
    return VerificationError(
        f"entry {index}: prev {recorded_prev} does not match the leaf hash {actual} of entry "
        f"{index - 1}",
        index=index,
    )


def _log_keys(origin: str, vkeys: Sequence[str]) -> list[str]:
    log_keys = []
    for vkey in vkeys:
        try:
            if PublicKey.from_vkey(vkey).name == origin:
                log_keys.append(vkey)
        except AttestationError as exc:
            raise VerificationError(f"bad verifier key {vkey!r}: {exc}") from None
    if not log_keys:
        raise VerificationError(
            f"expected a log key named {origin!r} among the verifier keys, got none"
        )
    return log_keys


def check_tree_nodes(leaves: Sequence[bytes], stored: Mapping[Node, bytes]) -> None:
    """The stored perfect-subtree hashes (what proofs are computed from) must be exactly
    those the leaves imply; a wrong node is reported at the first entry it covers."""
    expected = subtrees.all_nodes(leaves)
    for node in sorted(set(stored) | set(expected), key=lambda n: (n[1] << n[0], n[0])):
        if stored.get(node) != expected.get(node):
            level, position = node
            first = position << level
            raise VerificationError(
                f"entry {first}: stored tree node (level {level}, index {position}) does not "
                "match the entries; proofs served from it would not verify",
                index=first,
            )


def check_tree_heads(
    leaves: Sequence[bytes],
    heads: Sequence[SignedTreeHead],
    vkeys: Sequence[str],
    *,
    origin: str,
) -> None:
    """Every signed tree head of the run (one per size, oldest first) must be signed by the
    log key and commit to the entries up to its size."""
    sizes = [head.size for head in heads]
    if sizes != list(range(1, len(leaves) + 1)):
        shown = ", ".join(map(str, sizes[:5])) + (", ..." if len(sizes) > 5 else "")
        raise VerificationError(
            f"expected a signed tree head for every size 1..{len(leaves)}, got sizes [{shown}]"
        )
    nodes = subtrees.all_nodes(leaves)
    log_keys = _log_keys(origin, vkeys)
    for head in heads:
        expected = subtrees.range_hash((0, head.size), nodes)
        checkpoint = verify_checkpoint(head.note, log_keys, origin=origin)
        if checkpoint.size != head.size or checkpoint.root_hash != expected:
            raise VerificationError(
                f"entry {head.size - 1}: the signed tree head of size {head.size} does not "
                f"commit to the entries: expected root {expected.hex()}, got "
                f"{checkpoint.root_hash.hex()}",
                index=head.size - 1,
            )
        if checkpoint.root_hash != head.root_hash:
            raise VerificationError(
                f"entry {head.size - 1}: stored root {head.root_hash.hex()} of size "
                f"{head.size} differs from its signed note ({checkpoint.root_hash.hex()})",
                index=head.size - 1,
            )


def check_metrics(bodies: Sequence[bytes], points: Iterable[MetricPoint]) -> None:
    """Every metrics row must repeat the value its entry records under ``payload.metrics``
    (the charts are drawn from the rows, the signatures cover the entries)."""
    for point in sorted(points, key=lambda p: (p.entry_index, p.key)):
        recorded: object = None
        if 0 <= point.entry_index < len(bodies):
            envelope = parse_body(bodies[point.entry_index])
            metrics = envelope.payload.get("metrics")
            recorded = metrics.get(point.key) if isinstance(metrics, dict) else None
        if recorded != point.value:
            raise VerificationError(
                f"entry {point.entry_index}: metric {point.key!r} at step {point.step} is "
                f"{point.value!r} in the metrics table but {recorded!r} in the entry",
                index=point.entry_index,
            )
