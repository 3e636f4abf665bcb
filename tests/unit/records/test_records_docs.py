"""docs/records.md against the typed models: every example payload on the page reads as its
kind's record and back unchanged, and every field table lists exactly the record's fields."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from records import parse_record

DOC = Path(__file__).resolve().parents[3] / "docs" / "records.md"
KINDS = ["run.genesis", "data.manifest", "outer_step", "run.final"]


def _text() -> str:
    return DOC.read_text()


@pytest.mark.parametrize("kind", KINDS)
def test_the_example_on_the_page_is_a_valid_record(kind: str) -> None:
    match = re.search(rf"<!-- record: {re.escape(kind)} -->\n```json\n(.*?)\n```", _text(), re.S)
    assert match, f"docs/records.md has no example of {kind}"
    payload = json.loads(match.group(1))
    assert parse_record(kind, payload).to_payload() == payload


@pytest.mark.parametrize("kind", KINDS)
def test_the_field_table_lists_exactly_the_records_fields(kind: str) -> None:
    match = re.search(rf"<!-- fields: {re.escape(kind)} -->\n(.*?)\n\n", _text(), re.S)
    assert match, f"docs/records.md has no field table of {kind}"
    documented = re.findall(r"^\| `([a-z_]+)` \|", match.group(1), re.M)
    example = re.search(rf"<!-- record: {re.escape(kind)} -->\n```json\n(.*?)\n```", _text(), re.S)
    assert example
    fields = set(parse_record(kind, json.loads(example.group(1))).to_payload())
    assert sorted(documented) == sorted(fields)
