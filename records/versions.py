"""Schema versions: every version of every record format this veritrain has ever written, and
which one a payload is (docs/records.md, "Versions").

A public log is read for years by versions of veritrain that do not exist yet, and a run
recorded today is read by them. So a format is never changed in place: a change publishes a
new version ``veritrain/<format>/v<n+1>``, writers use the newest, and the reader keeps reading
every version it ever published. A payload names its version in its ``schema`` field;
:meth:`Format.version_of` reads it, refuses a version this code does not know with an
:class:`UnsupportedVersion` that says so (never a field-by-field error that could read as
tampering), and sets :attr:`Fields.version`, which the nested readers see too. A field added in
version n is read under ``if f.since(n):``, so the reader of each version reads exactly that
version's fields (``Fields.exactly`` still refuses any other).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from records.errors import MISSING, RecordError
from records.fields import Fields

_SCHEMA = re.compile(r"veritrain/(?P<format>[a-z._-]+)/v(?P<version>[1-9][0-9]*)")


class UnsupportedVersion(RecordError):
    """A payload of a schema version this veritrain does not read (a newer one, usually)."""

    def __init__(self, where: str, known: Format, got: object) -> None:
        self.format = known
        newer = (
            isinstance(got, str)
            and (match := _SCHEMA.fullmatch(got)) is not None
            and match["format"] == known.name
            and int(match["version"]) > known.newest
        )
        hint = "; it was written by a newer veritrain: upgrade to read it" if newer else ""
        super().__init__(
            where,
            "schema",
            f"a version of {known.name} this veritrain reads "
            f"({', '.join(map(repr, known.schemas))}){hint}",
            got,
        )


@dataclass(frozen=True)
class Format:
    """One record format and the versions of it ever published, oldest first."""

    name: str
    """As in the schema id, e.g. ``run.genesis``."""
    versions: tuple[int, ...]
    """Every published version; never shortened (a reader per version is kept for good)."""

    def __post_init__(self) -> None:
        if list(self.versions) != list(range(1, len(self.versions) + 1)):
            raise ValueError(f"Format.versions must be 1..n in order, got {self.versions}")

    @property
    def newest(self) -> int:
        """The version writers use."""
        return self.versions[-1]

    @property
    def schemas(self) -> tuple[str, ...]:
        return tuple(self.schema(v) for v in self.versions)

    @property
    def current(self) -> str:
        """The schema id writers put in a new payload."""
        return self.schema(self.newest)

    def schema(self, version: int) -> str:
        return f"veritrain/{self.name}/v{version}"

    def version_of_id(self, schema: str) -> int:
        """The version number a schema id of this format names (ValueError if none)."""
        match = _SCHEMA.fullmatch(schema)
        if match is None or match["format"] != self.name:
            raise ValueError(f"expected a {self.name} schema id, got {schema!r}")
        return int(match["version"])

    def version_of(self, f: Fields) -> int:
        """Read the payload's ``schema`` and set ``f.version`` (seen by every nested reader)."""
        value = f.raw("schema") if f.has("schema") else MISSING
        if not isinstance(value, str) or value not in self.schemas:
            raise UnsupportedVersion(f.where, self, value)
        f.version = self.version_of_id(value)
        return f.version


GENESIS = Format("run.genesis", (1, 2))
"""v2 (commit after 0313592) added ``rules``: the genesis names every rule it relies on."""
DATA_MANIFEST = Format("data.manifest", (1,))
OUTER_STEP = Format("outer_step", (1,))
FINAL = Format("run.final", (1,))
INNER_COMMITMENTS = Format("inner-commitments", (1,))

FORMATS: tuple[Format, ...] = (GENESIS, DATA_MANIFEST, OUTER_STEP, FINAL, INNER_COMMITMENTS)
"""Every versioned format of the records package (docs/records.md lists each version)."""
