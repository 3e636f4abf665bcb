"""ledger.merkle and the perfect-subtree layout against a straightforward recursive reference
that transcribes RFC 9162 §2.1 (MTH, PATH, PROOF/SUBPROOF) on random trees of 0-300 leaves."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import merkle, subtrees
from ledger.errors import InvalidRangeError, VerificationError

MAX_LEAVES = 300


# -- the reference: RFC 9162 §2.1 as written, on lists of leaf data -------------------------


def ref_mth(d: list[bytes]) -> bytes:
    n = len(d)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + d[0]).digest()
    k = 1
    while k * 2 < n:
        k *= 2
    return hashlib.sha256(b"\x01" + ref_mth(d[:k]) + ref_mth(d[k:])).digest()


def ref_path(m: int, d: list[bytes]) -> list[bytes]:
    n = len(d)
    if n == 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return [*ref_path(m, d[:k]), ref_mth(d[k:])]
    return [*ref_path(m - k, d[k:]), ref_mth(d[:k])]


def ref_subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if b else [ref_mth(d)]
    k = 1
    while k * 2 < n:
        k *= 2
    if m <= k:
        return [*ref_subproof(m, d[:k], b), ref_mth(d[k:])]
    return [*ref_subproof(m - k, d[k:], False), ref_mth(d[:k])]


def ref_proof(m: int, d: list[bytes]) -> list[bytes]:
    return ref_subproof(m, d, True)


# -- strategies ---------------------------------------------------------------------------


def tree(min_size: int = 0) -> st.SearchStrategy[list[bytes]]:
    # Distinct, short leaf data; the size is what matters for the tree shape.
    return st.integers(min_value=min_size, max_value=MAX_LEAVES).map(
        lambda n: [i.to_bytes(2, "big") for i in range(n)]
    )


@st.composite
def tree_and_index(draw: st.DrawFn) -> tuple[list[bytes], int]:
    data = draw(tree(min_size=1))
    return data, draw(st.integers(min_value=0, max_value=len(data) - 1))


@st.composite
def tree_and_sizes(draw: st.DrawFn) -> tuple[list[bytes], int, int]:
    data = draw(tree(min_size=1))
    size2 = draw(st.integers(min_value=1, max_value=len(data)))
    size1 = draw(st.integers(min_value=1, max_value=size2))
    return data, size1, size2


def hashes(data: list[bytes]) -> list[bytes]:
    return [merkle.leaf_hash(x) for x in data]


# -- properties ---------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(tree())
def test_root_hash_matches_the_reference(data: list[bytes]) -> None:
    assert merkle.root_hash(hashes(data)) == ref_mth(data)


@settings(max_examples=80, deadline=None)
@given(tree_and_index())
def test_inclusion_proof_matches_the_reference_and_verifies(case: tuple[list[bytes], int]) -> None:
    data, index = case
    leaves, size = hashes(data), len(data)
    proof = merkle.inclusion_proof(leaves, index, size)
    assert proof == ref_path(index, data)
    merkle.verify_inclusion(leaves[index], index, size, proof, ref_mth(data))


@settings(max_examples=80, deadline=None)
@given(tree_and_sizes())
def test_consistency_proof_matches_the_reference_and_verifies(
    case: tuple[list[bytes], int, int],
) -> None:
    data, size1, size2 = case
    leaves = hashes(data)
    proof = merkle.consistency_proof(leaves, size1, size2)
    assert proof == ref_proof(size1, data[:size2])
    merkle.verify_consistency(size1, size2, proof, ref_mth(data[:size1]), ref_mth(data[:size2]))


@settings(max_examples=60, deadline=None)
@given(tree_and_index(), st.data())
def test_a_corrupted_inclusion_proof_is_rejected(
    case: tuple[list[bytes], int], draw: st.DataObject
) -> None:
    data, index = case
    leaves, size = hashes(data), len(data)
    proof = merkle.inclusion_proof(leaves, index, size)
    root = ref_mth(data)
    if proof:
        position = draw.draw(st.integers(min_value=0, max_value=len(proof) - 1))
        bit = draw.draw(st.integers(min_value=0, max_value=255))
        broken = list(proof)
        broken[position] = _flip(broken[position], bit)
        with pytest.raises(VerificationError):
            merkle.verify_inclusion(leaves[index], index, size, broken, root)
        with pytest.raises(VerificationError):
            merkle.verify_inclusion(leaves[index], index, size, proof[:-1], root)
    with pytest.raises(VerificationError):
        merkle.verify_inclusion(leaves[index], index, size, [*proof, root], root)
    with pytest.raises(VerificationError):
        merkle.verify_inclusion(_flip(leaves[index], 0), index, size, proof, root)


@settings(max_examples=60, deadline=None)
@given(tree_and_sizes(), st.data())
def test_a_corrupted_consistency_proof_is_rejected(
    case: tuple[list[bytes], int, int], draw: st.DataObject
) -> None:
    data, size1, size2 = case
    proof = merkle.consistency_proof(hashes(data), size1, size2)
    root1, root2 = ref_mth(data[:size1]), ref_mth(data[:size2])
    if proof:
        position = draw.draw(st.integers(min_value=0, max_value=len(proof) - 1))
        broken = list(proof)
        broken[position] = _flip(broken[position], draw.draw(st.integers(0, 255)))
        with pytest.raises(VerificationError):
            merkle.verify_consistency(size1, size2, broken, root1, root2)
    with pytest.raises(VerificationError):
        merkle.verify_consistency(size1, size2, proof, root1, _flip(root2, 7))
    if size1 != size2:
        with pytest.raises(VerificationError):
            merkle.verify_consistency(size1, size2, proof, _flip(root1, 7), root2)


@settings(max_examples=60, deadline=None)
@given(tree_and_index(), tree_and_sizes())
def test_stored_subtrees_give_the_same_proofs(
    inclusion_case: tuple[list[bytes], int], consistency_case: tuple[list[bytes], int, int]
) -> None:
    # What ledger/tree_store.py does, without the database: proofs from perfect subtrees.
    data, index = inclusion_case
    nodes = subtrees.all_nodes(hashes(data))
    size = len(data)
    assert subtrees.range_hash((0, size), nodes) == ref_mth(data)
    path = merkle.inclusion_path(index, size)
    assert [subtrees.range_hash(r, nodes) for r in path] == ref_path(index, data)

    data, size1, size2 = consistency_case
    nodes = subtrees.all_nodes(hashes(data))
    path = merkle.consistency_path(size1, size2)
    assert [subtrees.range_hash(r, nodes) for r in path] == ref_proof(size1, data[:size2])


def test_appending_completes_exactly_the_nodes_the_full_tree_has() -> None:
    leaves = hashes([i.to_bytes(2, "big") for i in range(MAX_LEAVES)])
    stored: dict[subtrees.Node, bytes] = {}
    for index, leaf in enumerate(leaves):
        siblings = {node: stored[node] for node in subtrees.left_siblings(index)}
        stored |= subtrees.hash_completed(index, leaf, siblings)
        assert subtrees.range_hash((0, index + 1), stored) == merkle.root_hash(leaves[: index + 1])
    assert stored == subtrees.all_nodes(leaves)


def test_proof_requests_outside_the_tree_are_refused() -> None:
    leaves = hashes([b"a", b"b", b"c"])
    with pytest.raises(InvalidRangeError):
        merkle.inclusion_proof(leaves, 3, 3)
    with pytest.raises(InvalidRangeError):
        merkle.inclusion_proof(leaves, 0, 4)
    with pytest.raises(InvalidRangeError):
        merkle.consistency_proof(leaves, 0, 3)
    with pytest.raises(InvalidRangeError):
        merkle.consistency_proof(leaves, 3, 2)


def _flip(value: bytes, bit: int) -> bytes:
    position = bit // 8 % len(value)
    return value[:position] + bytes([value[position] ^ (1 << bit % 8)]) + value[position + 1 :]


def test_every_proof_of_every_tree_up_to_33_leaves_matches_the_reference() -> None:
    # Exhaustive where it is cheap: all shapes around the first powers of two.
    data = [i.to_bytes(2, "big") for i in range(33)]
    leaves = hashes(data)
    for size in range(1, len(data) + 1):
        for index in range(size):
            assert merkle.inclusion_proof(leaves, index, size) == ref_path(index, data[:size])
        for old in range(1, size + 1):
            assert merkle.consistency_proof(leaves, old, size) == ref_proof(old, data[:size])
