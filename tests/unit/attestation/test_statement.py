from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest

from attestation.canonical import canonical_json
from attestation.dsse import sign_envelope, verify_envelope
from attestation.errors import ParseError
from attestation.keys import SigningKey
from attestation.statement import (
    IN_TOTO_PAYLOAD_TYPE,
    OUTER_STEP_BUILD_TYPE,
    CodeDigest,
    DataShard,
    OuterStepProvenance,
    build_statement,
    encode_statement,
    parse_statement,
)


def _hex(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def _provenance(**overrides: Any) -> OuterStepProvenance:
    fields: dict[str, Any] = {
        "run_id": "run-7",
        "step": 12,
        "manifest_root": _hex("checkpoint 12"),
        "hyperparameters": {"inner_steps": 50, "outer_lr": 0.7, "outer_momentum": 0.9, "rank": 8},
        "previous_manifest_root": _hex("checkpoint 11"),
        "data_shards": (DataShard(name="shard-000003", sha256=_hex("shard 3")),),
        "code": CodeDigest(source_sha256=_hex("tree"), git_commit="a" * 40),
        "metrics_digest": _hex("metrics 12"),
        "internal_parameters": {"clusters": 2, "stages": 2},
    }
    fields.update(overrides)
    return OuterStepProvenance(**fields)


def test_statement_has_the_in_toto_and_slsa_shape() -> None:
    statement = build_statement(_provenance())
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement["subject"] == [
        {"name": "checkpoint/step-000012", "digest": {"sha256": _hex("checkpoint 12")}}
    ]
    build = statement["predicate"]["buildDefinition"]
    assert build["buildType"] == OUTER_STEP_BUILD_TYPE
    assert build["externalParameters"]["outer_lr"] == 0.7
    assert build["internalParameters"] == {"clusters": 2, "stages": 2}
    assert build["resolvedDependencies"] == [
        {"name": "checkpoint/step-000011", "digest": {"sha256": _hex("checkpoint 11")}},
        {"name": "data/shard-000003", "digest": {"sha256": _hex("shard 3")}},
        {"name": "code", "digest": {"gitCommit": "a" * 40, "sha256": _hex("tree")}},
    ]
    run = statement["predicate"]["runDetails"]
    assert run["builder"]["id"].startswith("https://")
    assert run["metadata"]["invocationId"] == "run-7/step-000012"
    assert run["byproducts"] == [{"name": "metrics", "digest": {"sha256": _hex("metrics 12")}}]


@pytest.mark.parametrize(
    "provenance",
    [
        _provenance(),
        _provenance(
            step=0,
            previous_manifest_root=None,
            data_shards=(),
            code=CodeDigest(source_sha256=_hex("tree")),
            internal_parameters=None,
        ),
        _provenance(run_id="org/run/with/slashes"),
    ],
    ids=["full", "minimal", "slashed-run-id"],
)
def test_parse_returns_what_was_built(provenance: OuterStepProvenance) -> None:
    payload = encode_statement(provenance)
    assert payload == canonical_json(json.loads(payload))
    assert parse_statement(payload) == provenance


def test_statement_travels_in_a_dsse_envelope() -> None:
    key = SigningKey.generate("attester")
    envelope = sign_envelope(encode_statement(_provenance()), IN_TOTO_PAYLOAD_TYPE, [key])
    verified = verify_envelope(envelope, keys=[key.public], payload_type=IN_TOTO_PAYLOAD_TYPE)
    assert parse_statement(verified.payload).manifest_root == _hex("checkpoint 12")


def test_unknown_fields_are_ignored() -> None:
    statement = build_statement(_provenance())
    statement["predicate"]["runDetails"]["metadata"]["startedOn"] = "2025-06-01T12:00:00Z"
    statement["predicate"]["buildDefinition"]["resolvedDependencies"][2]["uri"] = "git+https://x"
    assert parse_statement(canonical_json(statement)) == _provenance()


def _bend(path: list[Any], value: Any) -> bytes:
    statement = build_statement(_provenance())
    node = statement
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return canonical_json(statement)


_DELETE = object()
_DEPS = ["predicate", "buildDefinition", "resolvedDependencies"]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["_type"], "https://in-toto.io/Statement/v0.1", "_type: expected"),
        (["predicateType"], "https://slsa.dev/provenance/v0.2", "predicateType: expected"),
        (["subject"], [], "expected exactly one checkpoint, got 0"),
        (["subject", 0, "name"], "model.safetensors", "expected checkpoint/step-NNNNNN"),
        (["subject", 0, "digest"], {"sha512": "00"}, "expected a sha256 entry"),
        (["subject", 0, "digest", "sha256"], "ABC", "64 lower-case hex"),
        (["predicate", "buildDefinition", "buildType"], "https://x", "buildType: expected"),
        (
            ["predicate", "buildDefinition", "externalParameters"],
            _DELETE,
            "missing field externalParameters",
        ),
        (
            [*_DEPS, 2],
            {"name": "tool", "digest": {"sha256": "0" * 64}},
            "expected a checkpoint, data/ or code",
        ),
        (
            [*_DEPS, 0, "name"],
            "checkpoint/step-000010",
            "expected the previous checkpoint checkpoint/step-000011",
        ),
        (_DEPS, [], "expected a 'code' dependency"),
        (
            ["predicate", "runDetails", "metadata", "invocationId"],
            "run-7/step-000013",
            "invocationId: expected",
        ),
        (["predicate", "runDetails", "byproducts"], [], "expected one 'metrics' byproduct"),
    ],
)
def test_malformed_statements_are_rejected(path: list[Any], value: Any, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_statement(_bend(path, value))


def test_non_canonical_or_truncated_payload_is_rejected() -> None:
    payload = encode_statement(_provenance())
    with pytest.raises(ParseError, match="canonical"):
        parse_statement(json.dumps(json.loads(payload), indent=2).encode())
    with pytest.raises(ParseError, match="not valid JSON"):
        parse_statement(payload[:-1])


def test_invalid_inputs_are_refused_when_building() -> None:
    with pytest.raises(ValueError, match="manifest_root"):
        _provenance(manifest_root="xyz")
    with pytest.raises(ValueError, match="step 0 has no previous checkpoint"):
        _provenance(step=0)
    with pytest.raises(ValueError, match="git_commit"):
        CodeDigest(source_sha256=_hex("t"), git_commit="HEAD")
    with pytest.raises(ValueError, match="distinct shard names"):
        shard = DataShard(name="s", sha256=_hex("s"))
        _provenance(data_shards=(shard, dataclasses.replace(shard)))
