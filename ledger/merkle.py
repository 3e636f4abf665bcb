"""RFC 9162 §2.1 Merkle tree hashes, inclusion and consistency proofs, and their verifiers.

The tree is the one of RFC 6962/9162 (SHA-256, domain-separated leaves and nodes):

    MTH({})      = SHA-256()
    MTH({d0})    = SHA-256(0x00 || d0)                        (leaf hash)
    MTH(D[n])    = SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n]))  k = largest power of 2 < n

Proofs are described twice: as the leaf ranges [start, end) whose subtree hashes make up the
proof (:func:`inclusion_path`, :func:`consistency_path`), and as hashes computed from a list of
leaf hashes. The ranges let the ledger answer a proof from stored subtree hashes in O(log n)
reads (see ``ledger/tree_store.py``); the list functions are the contract of DESIGN.md §3.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ledger.errors import InvalidRangeError, VerificationError

HASH_SIZE = 32
"""Bytes in a SHA-256 digest, the only hash these logs use."""

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""MTH of the empty tree (RFC 9162 §2.1.1)."""

LeafRange = tuple[int, int]
"""Leaves [start, end) of one subtree whose hash is one element of a proof."""


def leaf_hash(data: bytes) -> bytes:
    """RFC 9162 §2.1.1: the hash of one leaf, SHA-256(0x00 || data)."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 §2.1.1: the hash of an interior node, SHA-256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def split_point(n: int) -> int:
    """The k of RFC 9162 §2.1.1 for a subtree of ``n`` > 1 leaves: the largest power of two
    strictly below ``n``."""
    return 1 << ((n - 1).bit_length() - 1)


def root_hash(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH over already-hashed leaves (RFC 9162 §2.1.1); the empty tree hashes to SHA-256()."""
    if not leaf_hashes:
        return EMPTY_ROOT
    return _subtree_hash(leaf_hashes, 0, len(leaf_hashes))


def inclusion_path(index: int, size: int) -> list[LeafRange]:
    """RFC 9162 §2.1.3.1 PATH(m, D[n]) as leaf ranges, from the leaf's sibling up to the
    root's child (the order the proof is sent in)."""
    _check_inclusion_range(index, size)
    path: list[LeafRange] = []
    start, end = 0, size
    while end - start > 1:
        k = split_point(end - start)
        if index < start + k:  # the leaf is on the left; the right subtree is its sibling
            path.append((start + k, end))
            end = start + k
        else:
            path.append((start, start + k))
            start += k
    path.reverse()
    return path


def consistency_path(size1: int, size2: int) -> list[LeafRange]:
    """RFC 9162 §2.1.4.1 PROOF(m, D[n]) as leaf ranges, in the order the proof is sent in."""
    _check_consistency_range(size1, size2)
    path: list[LeafRange] = []
    start, end, m = 0, size2, size1  # m counts the old tree's leaves inside [start, end)
    whole_old_tree = True  # SUBPROOF's flag b: the old tree is still D[0:m] itself
    while m != end - start:
        k = split_point(end - start)
        if m <= k:
            path.append((start + k, end))
            end = start + k
        else:
            path.append((start, start + k))
            start, m = start + k, m - k
            whole_old_tree = False
    if not whole_old_tree:  # SUBPROOF(m, D[m], false) = {MTH(D[m])}
        path.append((start, end))
    path.reverse()
    return path


def inclusion_proof(leaf_hashes: Sequence[bytes], index: int, size: int) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree of the first ``size`` leaves."""
    _check_available(leaf_hashes, size)
    return [_subtree_hash(leaf_hashes, a, b) for a, b in inclusion_path(index, size)]


def consistency_proof(leaf_hashes: Sequence[bytes], size1: int, size2: int) -> list[bytes]:
    """The proof that the tree of ``size2`` leaves extends the tree of ``size1`` leaves."""
    _check_available(leaf_hashes, size2)
    return [_subtree_hash(leaf_hashes, a, b) for a, b in consistency_path(size1, size2)]


def verify_inclusion(
    leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """Return None if ``proof`` shows ``leaf_hash`` at ``index`` in the tree ``root`` of
    ``size`` leaves; raise :class:`VerificationError` otherwise (RFC 9162 §2.1.3.2)."""
    # 1. The index must lie in the tree, and every hash must be a SHA-256 digest.
    if not 0 <= index < size:
        raise VerificationError(f"expected leaf index < tree size {size}, got {index}")
    _check_hash_sizes(leaf_hash=leaf_hash, root=root, proof=proof)
    # 2. fn walks the leaf's position up the tree, sn the last leaf's (the right edge).
    fn, sn = index, size - 1
    r = leaf_hash
    for p in proof:
        # 3. A proof longer than the tree is high has run off the root.
        if sn == 0:
            raise VerificationError(
                f"expected at most {_path_length(index, size)} proof hashes, got {len(proof)}"
            )
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            # A left child on the right edge has no sibling at this level: climb past it.
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    # 4. The walk must end exactly at the root, with the recomputed hash equal to it.
    if sn != 0:
        raise VerificationError(
            f"expected {_path_length(index, size)} proof hashes, got {len(proof)}"
        )
    if r != root:
        raise VerificationError(
            f"inclusion proof does not lead to the root: expected {root.hex()}, got {r.hex()}"
        )


def verify_consistency(
    size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes
) -> None:
    """Return None if ``proof`` shows the tree ``root2`` of ``size2`` leaves extends the tree
    ``root1`` of ``size1`` leaves; raise :class:`VerificationError` otherwise (RFC 9162
    §2.1.4.2). A proof from the empty tree proves nothing and is rejected."""
    # 1. Sizes: the old tree must be non-empty and no larger than the new one.
    if size1 == 0:
        raise VerificationError(
            "expected an old tree size of at least 1, got 0 (every tree extends the empty one)"
        )
    if size2 < size1:
        raise VerificationError(f"expected new size >= old size {size1}, got {size2}")
    # 2. Equal sizes: the trees must be the same and the proof empty.
    if size1 == size2:
        if proof:
            raise VerificationError(
                f"expected an empty proof for equal sizes, got {len(proof)} hashes"
            )
        if root1 != root2:
            raise VerificationError(
                f"trees of equal size {size1} must have equal "
                f"roots, got {root1.hex()} and {root2.hex()}"
            )
        return
    _check_hash_sizes(root1=root1, root2=root2, proof=proof)
    if not proof:
        raise VerificationError(f"expected a proof from size {size1} to {size2}, got none")
    # 3. When the old tree is a perfect subtree, its root is the proof's implicit first node.
    path = list(proof)
    if size1 & (size1 - 1) == 0:
        path.insert(0, root1)
    # 4. Climb past the levels where the old tree's last leaf is a right child.
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    # 5. Rebuild both roots at once: fr from the old tree's nodes, sr from all of them.
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise VerificationError(
                f"consistency proof from {size1} to {size2} has too many hashes ({len(proof)})"
            )
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    # 6. Both walks must reach their roots exactly.
    if sn != 0:
        raise VerificationError(
            f"consistency proof from {size1} to {size2} has too few hashes ({len(proof)})"
        )
    if fr != root1:
        raise VerificationError(
            "consistency proof does not lead to the old "
            f"root: expected {root1.hex()}, got {fr.hex()}"
        )
    if sr != root2:
        raise VerificationError(
            "consistency proof does not lead to the new "
            f"root: expected {root2.hex()}, got {sr.hex()}"
        )


def _subtree_hash(leaf_hashes: Sequence[bytes], start: int, end: int) -> bytes:
    if end - start == 1:
        return leaf_hashes[start]
    k = split_point(end - start)
    return node_hash(
        _subtree_hash(leaf_hashes, start, start + k), _subtree_hash(leaf_hashes, start + k, end)
    )


def _path_length(index: int, size: int) -> int:
    return len(inclusion_path(index, size))


def _check_inclusion_range(index: int, size: int) -> None:
    if not 0 <= index < size:
        raise InvalidRangeError(f"expected 0 <= index < size {size}, got index {index}")


def _check_consistency_range(size1: int, size2: int) -> None:
    if size1 < 1:
        raise InvalidRangeError(f"expected an old size of at least 1, got {size1}")
    if size2 < size1:
        raise InvalidRangeError(f"expected new size >= old size {size1}, got {size2}")


def _check_available(leaf_hashes: Sequence[bytes], size: int) -> None:
    if size > len(leaf_hashes):
        raise InvalidRangeError(f"expected a size <= {len(leaf_hashes)} leaves, got {size}")


def _check_hash_sizes(*, proof: Sequence[bytes], **named: bytes) -> None:
    for what, value in named.items():
        if len(value) != HASH_SIZE:
            raise VerificationError(f"expected a {HASH_SIZE}-byte {what}, got {len(value)} bytes")
    for i, p in enumerate(proof):
        if len(p) != HASH_SIZE:
            raise VerificationError(
                f"expected {HASH_SIZE}-byte proof hashes, got {len(p)} bytes at position {i}"
            )
