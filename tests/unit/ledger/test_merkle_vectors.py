"""ledger.merkle against the vectors kept under tests/assets/testvectors: transparency-dev/merkle
inclusion and consistency proofs (happy paths and every corruption they ship) and RFC 6962
roots."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import VerificationError
from ledger.merkle import (
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root_hash,
    verify_consistency,
    verify_inclusion,
)

VECTORS = Path(__file__).resolve().parents[2] / "assets" / "testvectors"


def _vector_files(kind: str) -> list[Path]:
    return sorted((VECTORS / "merkle" / kind).rglob("*.json"))


def _b64(value: str | None) -> bytes:
    return base64.b64decode(value) if value else b""


def _proof(vector: dict[str, Any]) -> list[bytes]:
    return [_b64(p) for p in vector["proof"] or []]


def _name(path: Path) -> str:
    return str(path.relative_to(VECTORS / "merkle"))


def test_the_vector_set_is_complete(testvectors: Path) -> None:
    assert testvectors == VECTORS
    assert len(_vector_files("inclusion")) >= 50
    assert len(_vector_files("consistency")) >= 50
    # Every file is the one copied (PROVENANCE.md): none edited, none missing, none added.
    listed = {}
    for line in (VECTORS / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name.removeprefix("./")] = digest
    present = {
        str(path.relative_to(VECTORS)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in VECTORS.rglob("*")
        if path.is_file() and path.name not in ("SHA256SUMS", "PROVENANCE.md")
    }
    assert present == listed


@pytest.mark.parametrize("path", _vector_files("inclusion"), ids=_name)
def test_inclusion_vector(path: Path) -> None:
    v = json.loads(path.read_text())
    args = (_b64(v["leafHash"]), v["leafIdx"], v["treeSize"], _proof(v), _b64(v["root"]))
    if v["wantErr"]:
        with pytest.raises(VerificationError):
            verify_inclusion(*args)
    else:
        verify_inclusion(*args)


@pytest.mark.parametrize("path", _vector_files("consistency"), ids=_name)
def test_consistency_vector(path: Path) -> None:
    v = json.loads(path.read_text())
    args = (v["size1"], v["size2"], _proof(v), _b64(v["root1"]), _b64(v["root2"]))
    if v["wantErr"]:
        with pytest.raises(VerificationError):
            verify_consistency(*args)
    else:
        verify_consistency(*args)


def _kat_tree(testvectors: Path) -> tuple[list[bytes], dict[int, bytes]]:
    kat = json.loads((testvectors / "kat.json").read_text())["rfc6962_roots"]
    leaves = [leaf_hash(bytes.fromhex(x)) for x in kat["leaf_inputs_hex"]]
    roots = {int(size): bytes.fromhex(root) for size, root in kat["root_hex_by_size"].items()}
    return leaves, roots


def test_rfc6962_roots(testvectors: Path) -> None:
    leaves, roots = _kat_tree(testvectors)
    assert set(roots) == set(range(9))
    for size, root in roots.items():
        assert root_hash(leaves[:size]) == root, f"size {size}"


def test_proofs_over_the_kat_tree_verify_against_its_roots(testvectors: Path) -> None:
    leaves, roots = _kat_tree(testvectors)
    for size in range(1, 9):
        for index in range(size):
            proof = inclusion_proof(leaves, index, size)
            verify_inclusion(leaves[index], index, size, proof, roots[size])
        for old in range(1, size + 1):
            proof = consistency_proof(leaves, old, size)
            verify_consistency(old, size, proof, roots[old], roots[size])


def test_the_happy_path_vectors_are_the_proofs_we_generate(testvectors: Path) -> None:
    # The transparency-dev vectors are built over the same eight leaves as kat.json.
    leaves, _ = _kat_tree(testvectors)
    compared = 0
    for path in _vector_files("inclusion"):
        v = json.loads(path.read_text())
        if v["desc"] == "happy path" and v["treeSize"] > 1:
            assert inclusion_proof(leaves, v["leafIdx"], v["treeSize"]) == _proof(v), path
            compared += 1
    for path in _vector_files("consistency"):
        v = json.loads(path.read_text())
        if v["desc"] == "happy path" and v["size1"] != v["size2"]:
            assert consistency_proof(leaves, v["size1"], v["size2"]) == _proof(v), path
            compared += 1
    assert compared >= 4
