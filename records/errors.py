"""The one error of the records package.

A payload that does not have the shape docs/records.md gives it raises :class:`RecordError`
naming the entry, the field and what was expected: a verifier reports it as "entry 5
(outer_step): field checkpoint.manifest_root: expected a 64-digit lowercase hex SHA-256, got
12", never as a ``KeyError`` that it could mistake for tampering with something else.
"""

from __future__ import annotations


class RecordError(ValueError):
    """A record payload is malformed: a field is missing, of the wrong type or out of range."""

    def __init__(self, where: str, field: str, expected: str, got: object) -> None:
        self.where = where
        """The record being read, e.g. ``entry 5 (outer_step)``."""
        self.field = field
        """Dotted path of the field, e.g. ``applied[0].round``; empty for the whole payload."""
        self.expected = expected
        self.got = got
        shown = _shown(got)
        place = f"{where}: field {field}" if field else where
        super().__init__(f"{place}: expected {expected}, got {shown}")


MISSING = object()
"""Stands for a field that is absent (``got`` of a :class:`RecordError`)."""


def _shown(value: object) -> str:
    if value is MISSING:
        return "nothing (the field is missing)"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
