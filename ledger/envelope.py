"""The entry envelope: what one log entry's body says, and how it is written.

A body is the RFC 8785 canonical JSON of

    {"kind": str, "run": run id, "index": int, "prev": hex leaf hash of entry index-1 | null,
     "recorded_at": RFC 3339 UTC time, "payload": {...}}

so every entry names its run and position and links to its predecessor: the run is a hash
chain as well as a Merkle tree (DESIGN.md §3). Bodies hold digests, never blobs, and are at
most 64 KiB.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from attestation.canonical import CanonicalizationError, canonical_json, parse_canonical_json
from ledger.errors import EntryTooLargeError, InvalidEntryError, InvalidRunIdError

# The kinds the ledger itself treats specially (genesis first, outer steps unique, nothing
# after the final entry); their payload formats live in records/.
from records.entry import KIND_DATA_MANIFEST as KIND_DATA_MANIFEST
from records.entry import KIND_FINAL as KIND_FINAL
from records.entry import KIND_GENESIS as KIND_GENESIS
from records.entry import KIND_OUTER_STEP as KIND_OUTER_STEP

# 64 KiB less one byte: C2SP tlog-tiles entry bundles prefix each entry with a big-endian
# uint16 length, so a body of 65,536 bytes could be logged but never served as a tile.
MAX_BODY_BYTES = 0xFFFF


ENVELOPE_FIELDS = frozenset({"kind", "run", "index", "prev", "recorded_at", "payload"})

# Run ids reach URLs, file names and C2SP origins (which forbid spaces and '+').
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_KIND = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
_HEX_HASH = re.compile(r"[0-9a-f]{64}")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z")


RESERVED_RUN_IDS = frozenset({"static"})
"""Run ids that would collide with a path the web app serves at its root (``/static`` is a
mount, so ``/static/resolve/...`` could never reach a run of that name)."""


def check_run_id(run_id: str) -> None:
    """Raise :class:`InvalidRunIdError` unless ``run_id`` is 1–64 of ``A-Z a-z 0-9 . _ -``,
    starting and ending with a letter or digit, without ``--`` or ``..``, and not reserved.

    Run ids reach URLs and Hugging Face repository ids (``hf_hub_download(repo_id=run)``),
    whose validator refuses ``--``, ``..`` and a leading or trailing ``-`` or ``.``."""
    if (
        not isinstance(run_id, str)
        or not _RUN_ID.fullmatch(run_id)
        or not run_id[-1].isalnum()
        or "--" in run_id
        or ".." in run_id
    ):
        raise InvalidRunIdError(
            "expected a run id of 1-64 letters, digits, '.', '_' or '-' that starts and ends "
            f"with a letter or digit and has no '--' or '..', got {run_id!r}"
        )
    if run_id in RESERVED_RUN_IDS:
        raise InvalidRunIdError(f"run id {run_id!r} is reserved (the web app serves /{run_id})")


def check_kind(kind: str) -> None:
    """Raise :class:`InvalidEntryError` unless ``kind`` looks like ``outer_step`` or
    ``run.final`` (lower case, dots, dashes, underscores)."""
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise InvalidEntryError(f"expected an entry kind like 'outer_step', got {kind!r}")


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 UTC with microseconds, e.g. ``2026-01-02T03:04:05.000006Z``."""
    if moment.tzinfo is None:
        raise InvalidEntryError(f"expected a timezone-aware time, got {moment!r}")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Envelope:
    """The fields of one entry body."""

    kind: str
    run: str
    index: int
    prev: str | None
    recorded_at: str
    payload: dict[str, Any]

    def body(self) -> bytes:
        """The canonical JSON body, refusing anything above :data:`MAX_BODY_BYTES`."""
        try:
            body = canonical_json(
                {
                    "kind": self.kind,
                    "run": self.run,
                    "index": self.index,
                    "prev": self.prev,
                    "recorded_at": self.recorded_at,
                    "payload": self.payload,
                }
            )
        except CanonicalizationError as exc:
            raise InvalidEntryError(
                f"{self.kind} payload is not JSON-serialisable: {exc}"
            ) from None
        if len(body) > MAX_BODY_BYTES:
            raise EntryTooLargeError(
                f"expected an entry body of at most {MAX_BODY_BYTES} bytes, got {len(body)} "
                f"for {self.kind}: store large data in the object store and record its digest"
            )
        return body


def build_body(
    *,
    kind: str,
    run_id: str,
    index: int,
    prev: bytes | None,
    recorded_at: datetime,
    payload: Mapping[str, Any],
) -> bytes:
    """The canonical body of a new entry."""
    if not isinstance(payload, Mapping):
        raise InvalidEntryError(f"expected a JSON object as payload, got {type(payload).__name__}")
    return Envelope(
        kind=kind,
        run=run_id,
        index=index,
        prev=None if prev is None else prev.hex(),
        recorded_at=format_timestamp(recorded_at),
        payload=dict(payload),
    ).body()


def parse_body(body: bytes) -> Envelope:
    """Read an entry body, insisting on canonical JSON and a well-formed envelope.

    Checks only what one body can show on its own; ``ledger/audit.py`` checks how bodies
    relate (index, run, prev chain)."""
    if len(body) > MAX_BODY_BYTES:
        raise InvalidEntryError(f"expected at most {MAX_BODY_BYTES} bytes, got {len(body)}")
    try:
        value = parse_canonical_json(body)
    except CanonicalizationError as exc:
        raise InvalidEntryError(f"body is not RFC 8785 canonical JSON: {exc}") from None
    if not isinstance(value, dict) or set(value) != ENVELOPE_FIELDS:
        got = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise InvalidEntryError(f"expected envelope fields {sorted(ENVELOPE_FIELDS)}, got {got}")
    kind, run, index, prev = value["kind"], value["run"], value["index"], value["prev"]
    recorded_at, payload = value["recorded_at"], value["payload"]
    check_kind(kind)
    if not isinstance(run, str):
        raise InvalidEntryError(f"expected a string run id, got {run!r}")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise InvalidEntryError(f"expected a non-negative integer index, got {index!r}")
    if prev is not None and not (isinstance(prev, str) and _HEX_HASH.fullmatch(prev)):
        raise InvalidEntryError(f"expected prev to be a hex SHA-256 or null, got {prev!r}")
    if not isinstance(recorded_at, str) or not _TIMESTAMP.fullmatch(recorded_at):
        raise InvalidEntryError(f"expected recorded_at as RFC 3339 UTC time, got {recorded_at!r}")
    if not isinstance(payload, dict):
        raise InvalidEntryError(f"expected a JSON object payload, got {type(payload).__name__}")
    return Envelope(
        kind=kind, run=run, index=index, prev=prev, recorded_at=recorded_at, payload=payload
    )
