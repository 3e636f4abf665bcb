"""Serialization of quotes and endorsements, and the report_data binding."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from attestation_scenario import Scenario

from attestation.canonical import canonical_json
from attestation.endorsement import Endorsement
from attestation.errors import ParseError
from attestation.quote import Quote, report_data


def test_report_data_is_sha512_of_nonce_leaf_and_statement() -> None:
    nonce, leaf, statement = b"n" * 32, b"l" * 32, b"s" * 32
    assert report_data(nonce, leaf, statement) == hashlib.sha512(nonce + leaf + statement).digest()
    assert len(report_data(nonce, leaf, statement)) == 64  # TDX REPORTDATA / configfs-tsm inblob


@pytest.mark.parametrize(
    ("nonce", "leaf", "statement", "message"),
    [
        (b"n" * 8, b"l" * 32, b"s" * 32, "nonce: expected 16..64 bytes, got 8"),
        (b"n" * 32, b"l" * 31, b"s" * 32, "prev_leaf_hash: expected 32 bytes"),
        (b"n" * 32, b"l" * 32, b"s" * 64, "statement_digest: expected 32 bytes"),
    ],
)
def test_report_data_refuses_ambiguous_inputs(
    nonce: bytes, leaf: bytes, statement: bytes, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        report_data(nonce, leaf, statement)


def test_quote_round_trips_through_canonical_json(scenario: Scenario) -> None:
    quote = scenario.quote()
    data = quote.to_json()
    assert data == canonical_json(json.loads(data))
    assert Quote.from_json(data) == quote
    body = json.loads(data)["body"]
    assert body["tee_type"] == "software"
    assert len(body["measurements"]["registers"]) == 4
    assert json.loads(data)["endorsement"]["body"]["issuer"] == scenario.root.public.vkey


def test_endorsement_round_trips(scenario: Scenario) -> None:
    endorsement = scenario.endorsement()
    data = endorsement.to_json()
    assert Endorsement.from_json(data) == endorsement
    assert json.loads(data)["body"]["not_before"] == "2025-05-31T12:00:00Z"


def _bent_quote(scenario: Scenario, path: list[Any], value: Any) -> bytes:
    obj = scenario.quote().to_dict()
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return canonical_json(obj)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["body", "svn"], True, "body.svn: expected an integer, got bool"),
        (["body", "svn"], -1, "expected an integer >= 0"),
        (["body", "debug"], 0, "expected true or false"),
        (["body", "nonce"], "AB" * 32, "lower-case hex"),
        (["body", "report_data"], "00" * 32, "expected 64 bytes, got 32"),
        (["body", "measurements", "registers"], ["00" * 48] * 3, "expected 4 values, got 3"),
        (["body", "measurements", "launch"], "00" * 32, "expected 48 bytes"),
        (["body", "tee_type"], "Software", "lower-case label"),
        (["body", "extra"], 1, "unexpected field\\(s\\) extra"),
        (["signature"], "not base64!", "expected standard base64"),
        (["signature"], "AAAA", None),  # well-formed but wrong: parses, fails verification later
        (["endorsement", "body", "not_after"], "2025-07-01", "RFC 3339"),
        (["endorsement", "body", "issuer"], "root+00000000+AAAA", "issuer"),
        (["endorsement", "signature"], "AAA", "standard base64"),
    ],
)
def test_quote_parsing_is_strict(
    scenario: Scenario, path: list[Any], value: Any, message: str | None
) -> None:
    data = _bent_quote(scenario, path, value)
    if message is None:
        assert Quote.from_json(data).signature == b"\x00\x00\x00"
        return
    with pytest.raises(ParseError, match=message):
        Quote.from_json(data)


def test_pretty_printed_quote_is_refused(scenario: Scenario) -> None:
    pretty = json.dumps(scenario.quote().to_dict(), indent=1).encode()
    with pytest.raises(ParseError, match="canonical"):
        Quote.from_json(pretty)


def test_endorsement_validity_must_be_an_interval(scenario: Scenario) -> None:
    from attestation_scenario import NOW

    with pytest.raises(ValueError, match="not_after: expected later than not_before"):
        scenario.endorsement(not_before=NOW, not_after=NOW)
