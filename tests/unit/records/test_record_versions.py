"""Schema versions (records/versions.py, docs/records.md "Versions"): writers use the newest
version of a format, every published version is read by its own reader, and a version this
code does not know is refused with an error that says so."""

from __future__ import annotations

import copy
import json
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from records import Genesis, RecordError, parse_record
from records.entry import READERS
from records.fields import Fields
from records.rules import RULES_V1, Rules
from records.versions import FORMATS, GENESIS, Format, UnsupportedVersion
from trainer.data.assignment import RULE_NAME as ASSIGNMENT_RULE
from trainer.outer.verdict import RULE_NAME as VERDICT_RULE
from veritrain.rules import IMPLEMENTED, WRITTEN, UnknownRule, require_implemented

V1_RUN = Path(__file__).resolve().parents[2] / "fixtures" / "v1-0313592" / "ledger.db"


def v1_genesis() -> dict[str, Any]:
    """The genesis payload exactly as veritrain 0313592 recorded it (tests/fixtures)."""
    db = sqlite3.connect(f"file:{V1_RUN}?immutable=1", uri=True)
    try:
        (body,) = db.execute("SELECT body FROM entries WHERE idx = 0").fetchone()
    finally:
        db.close()
    payload: dict[str, Any] = json.loads(body)["payload"]
    return payload


def v2_genesis() -> dict[str, Any]:
    payload = v1_genesis()
    payload["schema"] = "veritrain/run.genesis/v2"
    payload["rules"] = {
        "verdict": "veritrain.verdict/v1",
        "assignment": "veritrain.affine-window-permutation/v1",
        "tolerance": "veritrain.tolerance/v1",
        "commitments": "veritrain.inner-commitments/v1",
    }
    return payload


def test_a_new_genesis_is_written_in_the_newest_version_and_names_its_rules() -> None:
    old = Genesis.from_payload(v1_genesis())
    # What the recorder writes for a new run: the model's defaults and the rules it trains by.
    new = Genesis(
        **{k: v for k, v in vars(old).items() if k not in ("schema", "rules")}, rules=WRITTEN
    )

    payload = new.to_payload()

    assert payload["schema"] == "veritrain/run.genesis/v2" == GENESIS.current
    assert payload["rules"] == v2_genesis()["rules"]
    assert payload == v2_genesis()
    assert Genesis.from_payload(payload) == new


def test_both_genesis_versions_are_read_each_as_itself() -> None:
    v1, v2 = v1_genesis(), v2_genesis()

    old = parse_record("run.genesis", v1, index=0)
    new = parse_record("run.genesis", v2, index=0)

    assert isinstance(old, Genesis) and isinstance(new, Genesis)
    assert (old.version, old.schema) == (1, "veritrain/run.genesis/v1")
    assert old.rules == RULES_V1, "a v1 genesis relies on the rules of its time"
    assert old.to_payload() == v1 and "rules" not in old.to_payload()
    assert (new.version, new.rules) == (2, WRITTEN)
    assert new.to_payload() == v2


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda p: p.pop("rules"),
            "entry 0 (run.genesis): field rules: expected a value, "
            "got nothing (the field is missing)",
        ),
        (
            lambda p: p["rules"].update(verdict="the usual"),
            "entry 0 (run.genesis): field rules.verdict: expected a versioned rule name such as "
            "'veritrain.verdict/v1', got 'the usual'",
        ),
        (
            lambda p: p["rules"].update(aggregation="veritrain.mean/v1"),
            "entry 0 (run.genesis): field rules: expected only the fields of the format, "
            "not ['aggregation']",
        ),
        (
            lambda p: p.update(schema="veritrain/run.genesis/v1"),
            "entry 0 (run.genesis): expected only the fields of the format, not ['rules']",
        ),
    ],
    ids=["v2 without rules", "unversioned rule", "unknown rule kind", "v1 with rules"],
)
def test_each_version_reads_exactly_its_own_fields(edit: Any, message: str) -> None:
    payload = v2_genesis()
    edit(payload)

    with pytest.raises(RecordError) as raised:
        parse_record("run.genesis", payload, index=0)

    assert str(raised.value).startswith(message), str(raised.value)


@pytest.mark.parametrize("kind", ["run.genesis", "data.manifest", "outer_step", "run.final"])
def test_a_version_from_a_newer_veritrain_is_refused_saying_so(kind: str) -> None:
    payload = copy.deepcopy(json.loads(Path(__file__).with_name("examples.json").read_text())[kind])
    newer = payload["schema"].rsplit("/v", 1)[0] + "/v7"
    payload["schema"] = newer

    with pytest.raises(UnsupportedVersion) as raised:
        parse_record(kind, payload, index=4)

    assert str(raised.value) == (
        f"entry 4 ({kind}): field schema: expected a version of {kind} this veritrain reads "
        f"({', '.join(repr(s) for s in raised.value.format.schemas)}); it was written by a "
        f"newer veritrain: upgrade to read it, got {newer!r}"
    )


def test_every_format_names_every_version_it_ever_published() -> None:
    assert {f.name: f.versions for f in FORMATS} == {
        "run.genesis": (1, 2),
        "data.manifest": (1,),
        "outer_step": (1,),
        "run.final": (1,),
        "inner-commitments": (1,),
    }, "a published version is never dropped (add one, never remove or renumber)"


@dataclass(frozen=True)
class Enrolment:
    """A made-up format, to show how a later version adds an optional field: version 2 adds
    ``hardware`` (null when unmeasured); version 1 payloads keep reading as they did."""

    cluster: int
    hardware: str | None

    @classmethod
    def from_payload(cls, payload: Any) -> Enrolment:
        f = Fields(payload, where="enrolment")
        ENROLMENT.version_of(f)
        value = cls(
            cluster=f.integer("cluster"),
            hardware=f.optional_string("hardware") if f.since(2) else None,
        )
        f.exactly()
        return value


ENROLMENT = Format("enrolment", (1, 2))


def test_adding_an_optional_field_is_a_new_version_read_beside_the_old() -> None:
    v1 = {"schema": "veritrain/enrolment/v1", "cluster": 0}
    v2 = {"schema": "veritrain/enrolment/v2", "cluster": 0, "hardware": "H100"}

    assert Enrolment.from_payload(v1) == Enrolment(cluster=0, hardware=None)
    assert Enrolment.from_payload(v2) == Enrolment(cluster=0, hardware="H100")
    with pytest.raises(RecordError, match=r"not \['hardware'\]"):
        Enrolment.from_payload({**v1, "hardware": "H100"})


def test_format_versions_are_numbered_from_one_without_gaps() -> None:
    with pytest.raises(ValueError, match=r"1\.\.n"):
        Format("enrolment", (1, 3))


def test_new_runs_name_the_rules_the_trainer_runs_and_verify_implements() -> None:
    assert WRITTEN.verdict == VERDICT_RULE
    assert WRITTEN.assignment == ASSIGNMENT_RULE
    for kind, name in WRITTEN.named().items():
        assert name in IMPLEMENTED[kind], f"verify could not judge a new run's {kind} rule"
    for rules in (RULES_V1, WRITTEN):
        require_implemented(rules)  # old runs stay judged by their own rules


def test_a_rule_verify_does_not_implement_is_refused_by_name() -> None:
    later = Rules(
        verdict="veritrain.verdict/v2",
        assignment=RULES_V1.assignment,
        tolerance="veritrain.tolerance/v3",
        commitments=RULES_V1.commitments,
    )

    with pytest.raises(UnknownRule) as raised:
        require_implemented(later)

    assert str(raised.value) == (
        "the genesis names the verdict rule 'veritrain.verdict/v2', which this veritrain does "
        "not implement (it judges by veritrain.verdict/v1): the run cannot be judged by its own "
        "rules; upgrade veritrain; the genesis names the tolerance rule 'veritrain.tolerance/v3', "
        "which this veritrain does not implement (it judges by veritrain.tolerance/v1): the run "
        "cannot be judged by its own rules; upgrade veritrain"
    )


def test_the_versions_table_of_docs_records_lists_every_version() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "records.md").read_text()
    section = doc[doc.index("## Versions") :]
    rows = re.findall(r"^\| `([a-z._-]+)`(?: \(object\))? \| ([^|]+) \|", section, re.M)
    documented = {name: tuple(int(v) for v in re.findall(r"v(\d+)", cell)) for name, cell in rows}

    assert documented == {f.name: f.versions for f in FORMATS}
    assert {kind: fmt.name for kind, (fmt, _) in READERS.items()} == {
        kind: kind for kind in READERS
    }, "an entry kind's format carries the kind's name"
