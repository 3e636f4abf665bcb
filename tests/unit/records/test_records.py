"""The typed records (records/): every payload the recorder writes reads back as itself, and a
malformed one is one RecordError naming the entry, the field and what was expected -- never a
KeyError or TypeError a verifier could mistake for something else."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from records import RecordError, kinds_at, parse_record
from records.outer_step import DataRange, shard_runs, shards_read

EXAMPLES = Path(__file__).with_name("examples.json")


def examples() -> dict[str, dict[str, Any]]:
    """One real payload of each kind, as the recorder wrote them in a demo run."""
    loaded: dict[str, dict[str, Any]] = json.loads(EXAMPLES.read_text())
    return loaded


@pytest.mark.parametrize("kind", ["run.genesis", "data.manifest", "outer_step", "run.final"])
def test_a_recorded_payload_reads_back_as_itself(kind: str) -> None:
    payload = examples()[kind]
    assert parse_record(kind, payload, index=3).to_payload() == payload


def _with(payload: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    edited = copy.deepcopy(payload)
    *parents, last = path.split(".")
    node: Any = edited
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is _DELETE:
        del node[last]
    else:
        node[int(last) if isinstance(node, list) else last] = value
    return edited


_DELETE = object()

MALFORMED = [
    # (kind, field path, new value, what the error names, what it says was expected)
    (
        "outer_step",
        "checkpoint.manifest_root",
        _DELETE,
        "field checkpoint.manifest_root",
        "a value, got nothing",
    ),
    (
        "outer_step",
        "checkpoint.manifest_root",
        12,
        "field checkpoint.manifest_root",
        "64-digit lowercase hex",
    ),
    ("outer_step", "step", True, "field step", "an integer, got True"),
    ("outer_step", "step", -1, "field step", "an integer >= 0"),
    (
        "outer_step",
        "metrics.eval_loss",
        None,
        "field metrics.eval_loss",
        "a finite number, got None",
    ),
    ("outer_step", "applied.0.round", "2", "field applied[0].round", "an integer, got '2'"),
    (
        "outer_step",
        "data_ranges.0.shards",
        [[5, 3]],
        "field data_ranges[0].shards[0]",
        "sorted, disjoint",
    ),
    ("outer_step", "surprise", 1, "entry 3 (outer_step)", "only the fields of the format"),
    (
        "outer_step",
        "schema",
        "veritrain/outer_step/v0",
        "field schema",
        "'veritrain/outer_step/v1'",
    ),
    ("run.genesis", "keys.clusters", [], "field keys.clusters", "the keys of every cluster (2)"),
    (
        "run.genesis",
        "keys.clusters.1.cluster",
        0,
        "field keys.clusters[1].cluster",
        "1 (clusters in order)",
    ),
    (
        "run.genesis",
        "verification_policy.mode",
        "lenient",
        "field verification_policy.mode",
        "'bitwise', 'tolerance'",
    ),
    (
        "run.genesis",
        "tee.launch_measurement",
        "00",
        "field tee.launch_measurement",
        "96 lowercase hex digits",
    ),
    (
        "data.manifest",
        "manifest.shards.1.index",
        7,
        "field manifest.shards[1].index",
        "1 (shards in stream order)",
    ),
    ("run.final", "final_metrics", [], "field final_metrics", "a JSON object of numbers"),
]


@pytest.mark.parametrize(("kind", "path", "value", "where", "expected"), MALFORMED)
def test_a_malformed_payload_is_one_error_naming_entry_field_and_expectation(
    kind: str, path: str, value: Any, where: str, expected: str
) -> None:
    payload = _with(examples()[kind], path, value)
    with pytest.raises(RecordError) as raised:
        parse_record(kind, payload, index=3)
    message = str(raised.value)
    assert message.startswith(f"entry 3 ({kind})"), message
    assert where in message and expected in message, message


def test_an_unknown_kind_is_a_record_error() -> None:
    with pytest.raises(RecordError, match="expected one of the kinds"):
        parse_record("run.surprise", {}, index=9)


def test_shards_read_is_the_union_of_the_ranges_runs() -> None:
    ranges = [
        DataRange(
            cluster=0,
            first_inner_step=0,
            inner_steps=1,
            sequences=1,
            tokens=1,
            shards=((0, 2), (5, 5)),
        ),
        DataRange(
            cluster=1, first_inner_step=0, inner_steps=1, sequences=1, tokens=1, shards=((2, 3),)
        ),
    ]
    assert shards_read(ranges) == [0, 1, 2, 3, 5]
    assert shard_runs([5, 0, 1, 2, 3]) == ((0, 3), (5, 5))


def test_a_log_is_genesis_data_manifest_steps_and_a_final_only_at_its_end() -> None:
    assert kinds_at(0, last=False) == ("run.genesis",)
    assert kinds_at(1, last=True) == ("data.manifest",)
    assert kinds_at(2, last=False) == ("outer_step",)
    assert kinds_at(5, last=True) == ("outer_step", "run.final")
