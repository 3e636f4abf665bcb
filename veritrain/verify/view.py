"""A run's entries as the verifier reads them: parsed leniently, so that one broken entry
is reported by the check it breaks instead of hiding every other result."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ledger.envelope import KIND_DATA_MANIFEST, KIND_GENESIS, KIND_OUTER_STEP
from ledger.merkle import leaf_hash


@dataclass(frozen=True)
class ViewEntry:
    index: int
    """Position in the list as served (the body's own ``index`` may disagree if tampered)."""
    body: bytes
    leaf: bytes
    kind: str
    payload: dict[str, Any]
    recorded_at: datetime | None

    @property
    def step(self) -> int | None:
        step = self.payload.get("step") if self.kind == KIND_OUTER_STEP else None
        return step if isinstance(step, int) else None


@dataclass(frozen=True)
class RunView:
    run_id: str
    entries: list[ViewEntry]

    @classmethod
    def from_bodies(cls, run_id: str, bodies: list[bytes]) -> RunView:
        return cls(run_id, [_parse(i, b) for i, b in enumerate(bodies)])

    @property
    def genesis(self) -> dict[str, Any]:
        for entry in self.entries:
            if entry.kind == KIND_GENESIS:
                return entry.payload
        return {}

    @property
    def data_manifest(self) -> ViewEntry | None:
        return next((e for e in self.entries if e.kind == KIND_DATA_MANIFEST), None)

    @property
    def outer_steps(self) -> list[ViewEntry]:
        return [e for e in self.entries if e.kind == KIND_OUTER_STEP]

    def step_of(self, index: int | None) -> int | None:
        if index is None or not 0 <= index < len(self.entries):
            return None
        return self.entries[index].step


def _parse(index: int, body: bytes) -> ViewEntry:
    try:
        document = json.loads(body)
    except ValueError:
        document = {}
    if not isinstance(document, dict):
        document = {}
    payload = document.get("payload")
    recorded = document.get("recorded_at")
    try:
        recorded_at = datetime.fromisoformat(recorded.replace("Z", "+00:00")) if isinstance(recorded, str) else None
    except ValueError:
        recorded_at = None
    return ViewEntry(
        index=index,
        body=body,
        leaf=leaf_hash(body),
        kind=str(document.get("kind", "")),
        payload=payload if isinstance(payload, dict) else {},
        recorded_at=recorded_at,
    )
