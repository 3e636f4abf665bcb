"""Reading one JSON object field by field, with errors that name the field.

Every ``from_payload`` of the records package reads through :class:`Fields`, so every model
refuses the same things the same way: a missing field, a value of the wrong JSON type (a
boolean is never an integer), a number that is not finite, a digest that is not 64 lowercase
hex digits, and any field the format does not define (a payload is read exactly: what the
models do not know could not be shown or checked, so it is refused, not ignored).

A payload's schema version (records/versions.py) travels with its fields: ``f.since(n)`` says
whether the payload is of version n or later, so one reader reads each version's fields
exactly, the ones a later version added only there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from records.errors import MISSING, RecordError

T = TypeVar("T")

HEX_SHA256 = re.compile(r"[0-9a-f]{64}")


def is_digest(value: object) -> bool:
    return isinstance(value, str) and HEX_SHA256.fullmatch(value) is not None


class Fields:
    """The fields of one JSON object inside record ``where``, at dotted path ``path``."""

    def __init__(self, value: Any, *, where: str, path: str = "", version: int = 1) -> None:
        if not isinstance(value, Mapping):
            raise RecordError(where, path, "a JSON object", value)
        self.data: Mapping[str, Any] = value
        self.where = where
        self.path = path
        self.version = version
        """The schema version of the payload these fields are part of (set by
        ``records.versions.Format.version_of``; 1 for formats without versions)."""
        self._read: set[str] = set()

    def since(self, version: int) -> bool:
        """Whether the payload is of schema version ``version`` or later: a field that
        version added is read under ``if f.since(version):``."""
        return self.version >= version

    def child(self, value: Any, path: str) -> Fields:
        """The fields of a nested object, of the same payload (and version)."""
        return Fields(value, where=self.where, path=path, version=self.version)

    # -- structure ------------------------------------------------------------------------

    def at(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def fail(self, name: str, expected: str, got: object) -> RecordError:
        return RecordError(self.where, self.at(name), expected, got)

    def has(self, name: str) -> bool:
        return name in self.data

    def raw(self, name: str) -> Any:
        self._read.add(name)
        if name not in self.data:
            raise self.fail(name, "a value", MISSING)
        return self.data[name]

    def exactly(self, *, allowed: Sequence[str] = ()) -> None:
        """Refuse fields that were not read (``allowed`` may be absent or unread)."""
        extra = sorted(set(self.data) - self._read - set(allowed))
        if extra:
            raise RecordError(
                self.where,
                self.path,
                f"only the fields of the format, not {extra}",
                sorted(self.data),
            )

    # -- scalars --------------------------------------------------------------------------

    def string(
        self, name: str, *, choices: Sequence[str] | None = None, nonempty: bool = False
    ) -> str:
        value = self.raw(name)
        if not isinstance(value, str) or (nonempty and not value):
            raise self.fail(name, "a non-empty string" if nonempty else "a string", value)
        if choices is not None and value not in choices:
            raise self.fail(name, f"one of {', '.join(map(repr, choices))}", value)
        return value

    def optional_string(self, name: str) -> str | None:
        value = self.raw(name)
        if value is not None and not isinstance(value, str):
            raise self.fail(name, "a string or null", value)
        return value

    def integer(self, name: str, *, minimum: int | None = None) -> int:
        return as_int(self.raw(name), self, name, minimum=minimum)

    def number(self, name: str, *, minimum: float | None = None) -> float:
        return as_number(self.raw(name), self, name, minimum=minimum)

    def optional_number(self, name: str) -> float | None:
        """A finite number, or null where the writer had none (e.g. a measure that was not
        finite)."""
        value = self.raw(name)
        return None if value is None else as_number(value, self, name)

    def boolean(self, name: str) -> bool:
        value = self.raw(name)
        if not isinstance(value, bool):
            raise self.fail(name, "true or false", value)
        return value

    def digest(self, name: str) -> str:
        value = self.raw(name)
        if not is_digest(value):
            raise self.fail(name, "a 64-digit lowercase hex SHA-256", value)
        return str(value)

    def optional_digest(self, name: str) -> str | None:
        value = self.raw(name)
        if value is None:
            return None
        if not is_digest(value):
            raise self.fail(name, "a 64-digit lowercase hex SHA-256 or null", value)
        return str(value)

    def hex(self, name: str, *, nbytes: int) -> str:
        value = self.raw(name)
        if not (isinstance(value, str) and re.fullmatch(f"[0-9a-f]{{{2 * nbytes}}}", value)):
            raise self.fail(name, f"{2 * nbytes} lowercase hex digits", value)
        return value

    # -- containers -----------------------------------------------------------------------

    def obj(self, name: str) -> Fields:
        return self.child(self.raw(name), self.at(name))

    def mapping(self, name: str) -> dict[str, Any]:
        """A JSON object kept as data (its own format lives elsewhere, e.g. TrainConfig)."""
        value = self.raw(name)
        if not isinstance(value, Mapping):
            raise self.fail(name, "a JSON object", value)
        return dict(value)

    def numbers(self, name: str) -> dict[str, float]:
        """An object of finite numbers (metrics)."""
        value = self.raw(name)
        if not isinstance(value, Mapping):
            raise self.fail(name, "a JSON object of numbers", value)
        return {str(key): as_number(item, self, f"{name}.{key}") for key, item in value.items()}

    def array(self, name: str) -> list[Any]:
        value = self.raw(name)
        if not isinstance(value, list):
            raise self.fail(name, "a JSON array", value)
        return value

    def items(self, name: str, read: Callable[[Fields], T]) -> tuple[T, ...]:
        """A JSON array of objects, each read by ``read``."""
        return tuple(
            read(self.child(item, f"{self.at(name)}[{i}]"))
            for i, item in enumerate(self.array(name))
        )

    def integers(self, name: str, *, minimum: int | None = None) -> tuple[int, ...]:
        return tuple(
            as_int(item, self, f"{name}[{i}]", minimum=minimum)
            for i, item in enumerate(self.array(name))
        )

    def strings(self, name: str) -> tuple[str, ...]:
        values = self.array(name)
        for i, item in enumerate(values):
            if not isinstance(item, str):
                raise self.fail(f"{name}[{i}]", "a string", item)
        return tuple(values)


def as_int(value: Any, fields: Fields, name: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise fields.fail(name, "an integer", value)
    if minimum is not None and value < minimum:
        raise fields.fail(name, f"an integer >= {minimum}", value)
    return value


def as_number(value: Any, fields: Fields, name: str, *, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise fields.fail(name, "a finite number", value)
    if minimum is not None and value < minimum:
        raise fields.fail(name, f"a number >= {minimum}", value)
    return float(value)
