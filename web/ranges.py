"""Which bytes of an object a request asks for: ``Range``, ``If-Range`` and ``If-None-Match``
(RFC 9110 §13 and §14), decided once here for every back-end.

The decision is the same whether the bytes then come from a local file (Starlette's
``FileResponse``, which is handed a canonical ``Range`` header) or are streamed from S3:

- no ``Range``, a unit other than ``bytes``, or a syntactically invalid range set: the
  whole object, 200 (RFC 9110 §14.2: a server MUST ignore unknown units and MAY ignore an
  invalid range set; ignoring is what lets a confused client still get the object);
- an ``If-Range`` that is not our strong entity tag (a weak tag, another tag, or a date --
  objects have no date validators): the whole object, 200 (§13.1.5);
- ranges none of which overlaps the object: 416 with ``Content-Range: bytes */<size>``
  (§15.5.17);
- otherwise the satisfiable ranges, sorted, with overlapping or adjacent ones merged
  (§14.6 lets a server coalesce), clamped to the object: one range -> 206 with
  ``Content-Range``, several -> 206 ``multipart/byteranges``. More than
  :data:`MAX_RANGES` ranges after merging are ignored (200), a defence against requests for
  thousands of tiny ranges that §14.6 allows.

Objects are content-addressed and immutable, so the entity tag is the digest itself and
is strong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from web.errors import RangeNotSatisfiableError

MAX_RANGES = 100
"""Most ranges served as one multipart response (Starlette's FileResponse uses the same)."""

# RFC 9110 §14.1.2: int-range = first-pos "-" [ last-pos ]; suffix-range = "-" suffix-length.
_RANGE_SPEC = re.compile(r"(\d*)-(\d*)")
# RFC 9110 §8.8.3: entity-tag = [ weak ] opaque-tag; weak = %s"W/";
#                  opaque-tag = DQUOTE *etagc DQUOTE
_ENTITY_TAG = re.compile(r'(W/)?("[^"]*")')


@dataclass(frozen=True)
class ByteRange:
    """Bytes ``[start, end)`` of an object (``end`` exclusive, unlike HTTP's last-pos)."""

    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start

    def content_range(self, size: int) -> str:
        """The ``Content-Range`` value of this range of an object of ``size`` bytes."""
        return f"bytes {self.start}-{self.end - 1}/{size}"


def entity_tag(digest: str) -> str:
    """The strong entity tag of an object: its SHA-256 in quotes."""
    return f'"{digest}"'


def if_none_match_hits(header: str | None, etag: str) -> bool:
    """True when ``If-None-Match`` names ``etag`` or is ``*`` (RFC 9110 §13.1.2: weak
    comparison, so ``W/"x"`` matches ``"x"``); the answer is then 304 Not Modified."""
    if header is None:
        return False
    if header.strip() == "*":
        return True
    return any(opaque == etag for _, opaque in _entity_tags(header))


def requested_ranges(
    range_header: str | None, if_range: str | None, *, size: int, etag: str
) -> list[ByteRange] | None:
    """The ranges to serve, or None to serve the whole object; raises
    :class:`RangeNotSatisfiableError` when no requested range overlaps the object."""
    if range_header is None:
        return None
    if if_range is not None and not _if_range_holds(if_range, etag):
        return None
    unit, _, range_set = range_header.partition("=")
    if unit.strip().lower() != "bytes":
        return None
    specs = [part.strip() for part in range_set.split(",")]
    parsed: list[tuple[str, str]] = []
    for spec in specs:
        if not spec:
            continue  # RFC 9110 §5.6.1: recipients accept empty list elements
        match = _RANGE_SPEC.fullmatch(spec)
        if match is None or match.group(0) == "-":
            return None
        first, last = match.groups()
        if first and last and _position(last) < _position(first):
            return None  # §14.1.1: invalid when last-pos < first-pos
        parsed.append((first, last))
    if not parsed:
        return None
    satisfiable = [r for r in (_resolve(first, last, size) for first, last in parsed) if r]
    if not satisfiable:
        raise RangeNotSatisfiableError(size)
    merged = _coalesce(satisfiable)
    if len(merged) > MAX_RANGES:
        return None
    return merged


def range_header_value(ranges: list[ByteRange]) -> str:
    """A canonical ``Range`` value for ``ranges`` (what the local file response is given)."""
    return "bytes=" + ",".join(f"{r.start}-{r.end - 1}" for r in ranges)


_BEYOND_ANY_OBJECT = 1 << 63
"""Stands for a position of more digits than any object size has: Python refuses to convert
strings of over 4,300 digits to int, and no object is near 10**18 bytes anyway."""


def _position(digits: str) -> int:
    """A byte position from the header's digits, however many there are (RFC 9110 §14.1.1
    puts no limit on them)."""
    significant = digits.lstrip("0")
    return int(significant or "0") if len(significant) <= 18 else _BEYOND_ANY_OBJECT


def _resolve(first: str, last: str, size: int) -> ByteRange | None:
    """The part of one range spec inside an object of ``size`` bytes, or None if it is
    unsatisfiable (§14.1.2: a first-pos at or past the end; a suffix of length 0)."""
    if first:
        start = _position(first)
        if start >= size:
            return None
        end = size if not last else min(_position(last) + 1, size)
        return ByteRange(start, end)
    suffix = _position(last)
    if suffix == 0 or size == 0:
        return None
    return ByteRange(max(size - suffix, 0), size)


def _coalesce(ranges: list[ByteRange]) -> list[ByteRange]:
    merged: list[ByteRange] = []
    for current in sorted(ranges, key=lambda r: r.start):
        if merged and current.start <= merged[-1].end:
            previous = merged[-1]
            merged[-1] = ByteRange(previous.start, max(previous.end, current.end))
        else:
            merged.append(current)
    return merged


def _if_range_holds(if_range: str, etag: str) -> bool:
    # §13.1.5: only a strong entity tag that matches strongly keeps the Range; a date (we
    # send no Last-Modified for objects) or a weak tag means "send the whole thing".
    tags = _entity_tags(if_range)
    return len(tags) == 1 and not tags[0][0] and tags[0][1] == etag


def _entity_tags(header: str) -> list[tuple[bool, str]]:
    """(weak, opaque-tag) for each entity tag in a list header (opaque tags may themselves
    hold commas, so the tags are scanned rather than split)."""
    return [(m.group(1) is not None, m.group(2)) for m in _ENTITY_TAG.finditer(header)]
