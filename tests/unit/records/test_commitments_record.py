"""The per-inner-step commitments object (records/commitments.py) and the data manifest's chunk
indices: a written object reads back as itself, and a malformed one is refused naming the field."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from records import RecordError
from records.commitments import InnerCommitments
from records.data_manifest import CHUNK_BYTES, DataManifest, chunk_index

DIGEST = "ab" * 32


def _payload(**changes: Any) -> dict[str, Any]:
    tensors = {"model.norm.weight": [0.5] * 4, "model.embed_tokens.weight": [1.0, -2.0, None, 3.0]}
    payload: dict[str, Any] = {
        "schema": "veritrain/inner-commitments/v1",
        "run_id": "r",
        "step": 3,
        "cluster": 1,
        "stage": 0,
        "fingerprint": {"method": "count-sketch-splitmix64/v1", "dims": 4},
        "start": {"digest": DIGEST, "tensors": tensors},
        "inner_steps": [
            {"inner_step": 60 + k, "digest": DIGEST, "fingerprint": [0.25 * k, 1.0, 2.0, 3.0]}
            for k in range(3)
        ],
        "contributed": {"digest": DIGEST, "tensors": tensors},
    }
    payload.update(changes)
    return payload


def test_a_commitments_object_reads_back_as_itself_through_canonical_json() -> None:
    payload = json.loads(json.dumps(_payload()))
    commitments = InnerCommitments.from_payload(payload)
    assert commitments.to_payload() == payload
    assert commitments.first_inner_step == 60
    assert (
        commitments.start.tensors["model.embed_tokens.weight"][2] is None
    )  # a value that was not finite


@pytest.mark.parametrize(
    ("changes", "field", "expected"),
    [
        ({"inner_steps": []}, "inner_steps", "one commitment per inner step"),
        (
            {
                "inner_steps": [
                    {"inner_step": 5, "digest": DIGEST, "fingerprint": [0.0] * 4},
                    {"inner_step": 7, "digest": DIGEST, "fingerprint": [0.0] * 4},
                ]
            },
            "inner_steps[1].inner_step",
            "6 (consecutive)",
        ),
        (
            {"inner_steps": [{"inner_step": 5, "digest": DIGEST, "fingerprint": [0.0] * 3}]},
            "inner_steps[0].fingerprint",
            "4 numbers",
        ),
        (
            {"fingerprint": {"method": "gaussian", "dims": 4}},
            "fingerprint.method",
            "'count-sketch-splitmix64/v1'",
        ),
        (
            {"contributed": {"digest": DIGEST, "tensors": {"other": [0.0] * 4}}},
            "contributed.tensors",
            "the tensors of start",
        ),
        ({"step": "3"}, "step", "an integer"),
    ],
)
def test_a_malformed_commitments_object_names_the_field(
    changes: dict[str, Any], field: str, expected: str
) -> None:
    with pytest.raises(RecordError, match="expected") as raised:
        InnerCommitments.from_payload(_payload(**changes))
    assert raised.value.field == field
    assert expected in raised.value.expected


def test_the_chunk_index_is_the_sha256_of_each_piece() -> None:
    data = bytes(range(256)) * 40  # 10,240 bytes: two full chunks and a short one
    index = chunk_index(data)
    assert len(index) == 3 * 32
    assert index[:32] == hashlib.sha256(data[:CHUNK_BYTES]).digest()
    assert index[64:] == hashlib.sha256(data[2 * CHUNK_BYTES :]).digest()


def test_a_manifest_with_chunk_size_but_a_shard_without_an_index_is_refused() -> None:
    manifest = {
        "format": "veritrain.data-manifest/v1",
        "corpus": {"kind": "files"},
        "sources": [],
        "tokenizer": {"kind": "bytes", "vocab_size": 256, "end_of_text": 0},
        "shard_format": {
            "dtype": "uint16",
            "byte_order": "little",
            "header_bytes": 0,
            "tokens_per_shard": 4,
            "file_name": "<sha256>.bin",
            "chunk_bytes": 4096,
        },
        "shards": [
            {"index": 0, "sha256": DIGEST, "tokens": 4, "split": "train", "chunks": DIGEST},
            {"index": 1, "sha256": DIGEST, "tokens": 4, "split": "eval"},
        ],
        "dropped_tokens": 0,
    }
    with pytest.raises(RecordError) as raised:
        DataManifest.from_payload(manifest)
    assert raised.value.field == "shards[1].chunks"
    del manifest["shard_format"]["chunk_bytes"]  # type: ignore[attr-defined]
    del manifest["shards"][0]["chunks"]  # type: ignore[index]
    assert DataManifest.from_payload(manifest).object_digests == [
        DIGEST,
        DIGEST,
    ]  # no index: read whole
