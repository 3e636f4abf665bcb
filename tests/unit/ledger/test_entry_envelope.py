"""Entry envelopes: run ids that are safe in URLs and origins, canonical bodies, the size
limit, and strict parsing of what a body claims."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from attestation.canonical import canonical_json
from ledger.envelope import MAX_BODY_BYTES, build_body, check_run_id, parse_body
from ledger.errors import EntryTooLargeError, InvalidEntryError, InvalidRunIdError
from ledger.tiles import entry_bundle

WHEN = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)


def body(**payload: object) -> bytes:
    return build_body(
        kind="outer_step",
        run_id="r1",
        index=1,
        prev=b"\x11" * 32,
        recorded_at=WHEN,
        payload=payload,
    )


@pytest.mark.parametrize("run_id", ["r1", "run-2026.01_a", "A", "9" * 64])
def test_good_run_ids_are_accepted(run_id: str) -> None:
    check_run_id(run_id)


@pytest.mark.parametrize(
    "run_id", ["", "-r", ".hidden", "a/b", "a b", "a+b", "ä", "x" * 65, "../etc", "r\n"]
)
def test_run_ids_that_could_escape_a_url_or_origin_are_refused(run_id: str) -> None:
    with pytest.raises(InvalidRunIdError, match="expected a run id"):
        check_run_id(run_id)


@pytest.mark.parametrize("run_id", ["run--2", "run..2", "run-", "run.", "run_"])
def test_run_ids_a_hugging_face_client_could_not_name_are_refused(run_id: str) -> None:
    with pytest.raises(InvalidRunIdError, match="starts and ends"):
        check_run_id(run_id)


def test_a_run_id_the_web_app_serves_at_its_root_is_reserved() -> None:
    with pytest.raises(InvalidRunIdError, match="reserved"):
        check_run_id("static")


def test_the_body_is_canonical_json_of_the_envelope() -> None:
    data = body(loss=0.5, b=[1, 2])
    assert data == (
        b'{"index":1,"kind":"outer_step","payload":{"b":[1,2],"loss":0.5},'
        b'"prev":"' + b"11" * 32 + b'","recorded_at":"2026-01-02T03:04:05.000006Z","run":"r1"}'
    )
    envelope = parse_body(data)
    assert (envelope.kind, envelope.index, envelope.payload) == (
        "outer_step",
        1,
        {"b": [1, 2], "loss": 0.5},
    )


def test_bodies_above_64_kib_are_refused_with_advice() -> None:
    with pytest.raises(EntryTooLargeError, match=f"at most {MAX_BODY_BYTES} bytes.*object store"):
        body(blob="x" * MAX_BODY_BYTES)


def test_the_largest_body_the_ledger_accepts_still_fits_a_tile_bundle() -> None:
    """tlog-tiles frames each entry with a uint16 length: an accepted entry must be servable."""
    empty = len(body(blob=""))
    largest = body(blob="x" * (MAX_BODY_BYTES - empty))
    assert len(largest) == MAX_BODY_BYTES
    assert entry_bundle([largest])[:2] == MAX_BODY_BYTES.to_bytes(2, "big")
    with pytest.raises(EntryTooLargeError):
        body(blob="x" * (MAX_BODY_BYTES - empty + 1))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {1, 2}, 2**60])
def test_values_without_a_canonical_form_are_refused(value: object) -> None:
    with pytest.raises(InvalidEntryError, match="not JSON-serialisable"):
        body(value=value)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda e: json.dumps(e).encode(), "canonical"),  # spaces after separators
        (lambda e: _canon({**e, "extra": 1}), "envelope fields"),
        (lambda e: _canon({**e, "index": -1}), "non-negative integer index"),
        (lambda e: _canon({**e, "prev": "zz"}), "hex SHA-256"),
        (lambda e: _canon({**e, "recorded_at": "yesterday"}), "RFC 3339"),
        (lambda e: _canon({**e, "payload": [1]}), "JSON object payload"),
        (lambda e: _canon({**e, "kind": "Outer Step"}), "entry kind"),
    ],
)
def test_parsing_refuses_malformed_envelopes(
    mutate: Callable[[dict[str, Any]], bytes], message: str
) -> None:
    envelope = json.loads(body(x=1))
    with pytest.raises(InvalidEntryError, match=message):
        parse_body(mutate(envelope))


def _canon(value: object) -> bytes:
    return canonical_json(value)
