"""A run's Merkle tree in the ``tree_nodes`` table: written on append, read for proofs.

Layout and hashing rules are in ``ledger/subtrees.py``. Costs, for a log of n entries:

- append: one query for the left siblings and the root's subtrees (≤ 2·log2 n nodes), one
  insert of the ≤ 1 + log2 n newly completed nodes;
- root, inclusion or consistency proof at any size: one query for ≤ 2·log2 n nodes.

No proof ever reads the entries, so proof cost does not grow with the log.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ledger import merkle, subtrees
from ledger.errors import VerificationError
from ledger.models import TreeNode
from ledger.subtrees import Node

# Stay well below SQLite's and psycopg's bound-parameter limits in one IN list.
_MAX_NODES_PER_QUERY = 400


def read_nodes(session: Session, run_id: str, nodes: Collection[Node]) -> dict[Node, bytes]:
    """The stored hashes of ``nodes`` (missing ones are simply absent)."""
    wanted = sorted(nodes)
    found: dict[Node, bytes] = {}
    for start in range(0, len(wanted), _MAX_NODES_PER_QUERY):
        chunk = wanted[start : start + _MAX_NODES_PER_QUERY]
        rows = session.execute(
            sa.select(TreeNode.level, TreeNode.index, TreeNode.hash).where(
                TreeNode.run_id == run_id,
                sa.tuple_(TreeNode.level, TreeNode.index).in_(chunk),
            )
        )
        found.update({(level, index): digest for level, index, digest in rows})
    return found


def append_leaf(session: Session, run_id: str, index: int, leaf: bytes) -> bytes:
    """Store leaf ``index`` and the nodes it completes; return the new root (size index+1)."""
    root_parts = subtrees.decompose((0, index + 1))
    completed = set(subtrees.completed_by_append(index))
    known = read_nodes(
        session, run_id, set(subtrees.left_siblings(index)) | (set(root_parts) - completed)
    )
    new_nodes = subtrees.hash_completed(index, leaf, known)
    session.execute(
        sa.insert(TreeNode),
        [
            {"run_id": run_id, "level": level, "index": position, "hash": digest}
            for (level, position), digest in new_nodes.items()
        ],
    )
    return subtrees.range_hash((0, index + 1), known | new_nodes)


def root_at(session: Session, run_id: str, size: int) -> bytes:
    """The root hash of the run's tree at ``size`` (≥ 1) entries."""
    leaves = (0, size)
    return subtrees.range_hash(leaves, read_nodes(session, run_id, subtrees.decompose(leaves)))


def inclusion_proof(
    session: Session, run_id: str, index: int, size: int
) -> tuple[bytes, list[bytes]]:
    """The leaf hash of entry ``index`` and its inclusion proof in the tree of ``size``."""
    path = merkle.inclusion_path(index, size)
    leaf = (0, index)
    nodes = read_nodes(session, run_id, subtrees.nodes_for(path) | {leaf})
    if leaf not in nodes:
        raise VerificationError(f"stored tree of run {run_id!r} is missing leaf {index}")
    return nodes[leaf], _hash_ranges(path, nodes)


def consistency_proof(session: Session, run_id: str, size1: int, size2: int) -> list[bytes]:
    """The proof that the tree of ``size2`` entries extends the tree of ``size1``."""
    path = merkle.consistency_path(size1, size2)
    return _hash_ranges(path, read_nodes(session, run_id, subtrees.nodes_for(path)))


def stored_nodes(session: Session, run_id: str) -> dict[Node, bytes]:
    """Every stored node of the run (for audits, which re-derive them all)."""
    rows = session.execute(
        sa.select(TreeNode.level, TreeNode.index, TreeNode.hash).where(TreeNode.run_id == run_id)
    )
    return {(level, index): digest for level, index, digest in rows}


def _hash_ranges(path: Sequence[merkle.LeafRange], nodes: dict[Node, bytes]) -> list[bytes]:
    return [subtrees.range_hash(leaves, nodes) for leaves in path]
