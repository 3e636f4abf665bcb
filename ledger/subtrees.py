"""Where a stored Merkle tree keeps its hashes: the layout of perfect subtrees.

The ledger stores the hash of every *complete perfect subtree* of a run's tree, addressed
``(level, index)``: the node covers leaves ``[index·2^level, (index+1)·2^level)``. Level 0 are
the leaf hashes. These nodes never change once the log has grown past them, so they are
written once, on the append that completes them (at most 1 + log2(n) rows per append).

Every subtree RFC 9162 needs (a proof element, or the root) covers a range ``[start, end)``
whose start is a multiple of 2^ceil(log2(end − start)), because the RFC splits a range at
the largest power of two below its length. Such a range is the concatenation of perfect
subtrees of decreasing size — one per bit of ``end − start`` — and its RFC hash is their
right fold (RFC 9162 §2.1.1 applied recursively). So any proof element costs at most
log2(n) node reads, and a whole proof O(log n) reads, fetched in one query.

This module is pure: it only computes addresses and folds hashes; ``ledger/tree_store.py``
reads and writes the nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ledger.errors import VerificationError
from ledger.merkle import LeafRange, node_hash

Node = tuple[int, int]
"""(level, index) of a perfect subtree."""


def decompose(leaves: LeafRange) -> list[Node]:
    """The perfect subtrees that make up ``[start, end)``, left to right (largest first)."""
    start, end = leaves
    if not 0 <= start < end:
        raise ValueError(f"expected a non-empty leaf range, got [{start}, {end})")
    nodes: list[Node] = []
    position = start
    for level in range((end - start).bit_length() - 1, -1, -1):
        if (end - start) >> level & 1:
            if position % (1 << level):
                raise ValueError(
                    f"leaf range [{start}, {end}) is not a subtree of an RFC 9162 tree"
                )
            nodes.append((level, position >> level))
            position += 1 << level
    return nodes


def nodes_for(ranges: Iterable[LeafRange]) -> set[Node]:
    """Every stored node needed to hash all of ``ranges``."""
    return {node for leaves in ranges for node in decompose(leaves)}


def range_hash(leaves: LeafRange, nodes: Mapping[Node, bytes]) -> bytes:
    """The RFC 9162 hash of ``[start, end)`` from the stored perfect-subtree hashes."""
    parts = decompose(leaves)
    try:
        hashes = [nodes[node] for node in parts]
    except KeyError as missing:
        raise VerificationError(
            f"stored tree is missing node (level, index) = {missing.args[0]}"
        ) from None
    result = hashes[-1]
    for left in reversed(hashes[:-1]):  # the RFC splits off the largest left subtree first
        result = node_hash(left, result)
    return result


def completed_by_append(index: int) -> list[Node]:
    """The nodes that become complete when leaf ``index`` is appended, bottom up: the leaf
    itself, then one parent for each level at which the new node is a right child."""
    nodes = [(0, index)]
    level = 0
    while index >> level & 1:
        level += 1
        nodes.append((level, index >> level))
    return nodes


def left_siblings(index: int) -> list[Node]:
    """The stored nodes that are hashed with the new ones when leaf ``index`` is appended
    (the left sibling of each completed node below the top one)."""
    return [(level, (index >> level) - 1) for level in range(len(completed_by_append(index)) - 1)]


def hash_completed(index: int, leaf: bytes, siblings: Mapping[Node, bytes]) -> dict[Node, bytes]:
    """Hashes of the nodes :func:`completed_by_append` names, given the new leaf hash and
    the hashes of :func:`left_siblings`."""
    completed = completed_by_append(index)
    hashes = {completed[0]: leaf}
    current = leaf
    for level, parent in enumerate(completed[1:]):
        current = node_hash(siblings[(level, (index >> level) - 1)], current)
        hashes[parent] = current
    return hashes


def all_nodes(leaf_hashes: Sequence[bytes]) -> dict[Node, bytes]:
    """Every complete perfect subtree of the tree over ``leaf_hashes``, derived from them
    (what the store should hold; audits compare the two)."""
    nodes: dict[Node, bytes] = {}
    level_hashes = list(leaf_hashes)
    level = 0
    while level_hashes:
        nodes.update({(level, i): h for i, h in enumerate(level_hashes)})
        level_hashes = [
            node_hash(level_hashes[i], level_hashes[i + 1])
            for i in range(0, len(level_hashes) - 1, 2)
        ]
        level += 1
    return nodes
