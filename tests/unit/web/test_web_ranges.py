"""The Range / If-Range / If-None-Match decisions (RFC 9110 §13-14), independent of any
back-end."""

from __future__ import annotations

import pytest

from web.errors import RangeNotSatisfiableError
from web.ranges import (
    ByteRange,
    entity_tag,
    if_none_match_hits,
    range_header_value,
    requested_ranges,
)

ETAG = entity_tag("ab" * 32)


def ranges(
    header: str | None, size: int = 1000, if_range: str | None = None
) -> list[tuple[int, int]] | None:
    found = requested_ranges(header, if_range, size=size, etag=ETAG)
    return None if found is None else [(r.start, r.end) for r in found]


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("bytes=0-99", [(0, 100)]),
        ("bytes=100-", [(100, 1000)]),
        ("bytes=-10", [(990, 1000)]),
        ("bytes=-5000", [(0, 1000)]),  # a suffix longer than the object is the whole object
        ("bytes=990-5000", [(990, 1000)]),  # last-pos past the end is clamped
        ("BYTES = 0-0", [(0, 1)]),  # unit is case-insensitive, whitespace allowed
        ("bytes=0-9, 20-29", [(0, 10), (20, 30)]),
        ("bytes=20-29,0-9", [(0, 10), (20, 30)]),  # sorted
        ("bytes=0-9,5-19,20-29", [(0, 30)]),  # overlapping and adjacent ranges merged
        ("bytes=0-9,,20-29", [(0, 10), (20, 30)]),  # empty list elements are accepted
        ("bytes=0-9,2000-3000", [(0, 10)]),  # unsatisfiable members dropped when others remain
    ],
)
def test_satisfiable_ranges(header: str, expected: list[tuple[int, int]]) -> None:
    assert ranges(header) == expected


@pytest.mark.parametrize(
    "header",
    [
        "items=0-9",
        "bytes",
        "bytes=",
        "bytes=abc",
        "bytes=5-3",
        "bytes=-",
        "bytes=1-2-3",
        "bytes=0-9,x",
    ],
)
def test_unknown_units_and_invalid_range_sets_are_ignored(header: str) -> None:
    assert ranges(header) is None


@pytest.mark.parametrize(
    "header", ["bytes=1000-", "bytes=5000-6000", "bytes=-0", "bytes=1000-1001,2000-"]
)
def test_ranges_that_miss_the_object_are_416_with_its_size(header: str) -> None:
    with pytest.raises(RangeNotSatisfiableError) as raised:
        ranges(header)
    assert raised.value.headers == {"Content-Range": "bytes */1000"}


def test_any_range_of_an_empty_object_is_unsatisfiable() -> None:
    with pytest.raises(RangeNotSatisfiableError):
        ranges("bytes=-5", size=0)


def test_too_many_ranges_are_ignored_but_mergeable_ones_are_not() -> None:
    many = "bytes=" + ",".join(f"{i * 3}-{i * 3}" for i in range(101))
    adjacent = "bytes=" + ",".join(f"{i}-{i}" for i in range(500))

    assert ranges(many, size=10_000) is None
    assert ranges(adjacent, size=10_000) == [(0, 500)]


@pytest.mark.parametrize(
    ("if_range", "honoured"),
    [
        (ETAG, True),
        (f"W/{ETAG}", False),
        ('"other"', False),
        ("Tue, 01 Jan 2030 00:00:00 GMT", False),
    ],
)
def test_if_range_keeps_the_range_only_for_our_strong_tag(if_range: str, honoured: bool) -> None:
    assert ranges("bytes=0-9", if_range=if_range) == ([(0, 10)] if honoured else None)


@pytest.mark.parametrize(
    ("header", "hit"),
    [
        (ETAG, True),
        (f"W/{ETAG}", True),
        ("*", True),
        (f'"x", {ETAG}', True),
        ('"x"', False),
        ("", False),
        (None, False),
    ],
)
def test_if_none_match_uses_weak_comparison(header: str | None, hit: bool) -> None:
    assert if_none_match_hits(header, ETAG) is hit


def test_the_canonical_header_round_trips() -> None:
    chosen = [ByteRange(0, 10), ByteRange(20, 30)]

    assert range_header_value(chosen) == "bytes=0-9,20-29"
    assert ranges(range_header_value(chosen)) == [(0, 10), (20, 30)]
    assert ByteRange(20, 30).content_range(1000) == "bytes 20-29/1000"
