"""``run.final``: the end of a run, summarising its last outer step (docs/records.md).

It is derived, never measured anew: :meth:`RunFinal.after` is the one writer, used by the
recorder at the end of a run and by ``veritrain train --resume`` for a run killed between its
last step and its final entry; a verifier recomputes it from the last ``outer_step`` entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from records.fields import Fields
from records.outer_step import OuterStep
from records.versions import FINAL

SCHEMA = FINAL.current


@dataclass(frozen=True, kw_only=True)
class RunFinal:
    steps: int
    """Outer steps recorded (the last is ``steps - 1``)."""
    tokens: int
    """Tokens trained on over the whole run."""
    final_metrics: Mapping[str, float]
    """The last step's metrics."""
    last_manifest_root: str
    """The last checkpoint (``last_checkpoint.manifest_root``)."""
    schema: str = field(default=SCHEMA)

    @classmethod
    def after(cls, last: OuterStep) -> RunFinal:
        """The final entry of a run whose last outer step is ``last``."""
        return cls(
            steps=last.step + 1,
            tokens=last.tokens.total,
            final_metrics=dict(last.metrics),
            last_manifest_root=last.checkpoint.manifest_root,
        )

    def to_payload(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "steps": self.steps,
            "tokens": self.tokens,
            "final_metrics": dict(self.final_metrics),
            "last_checkpoint": {"manifest_root": self.last_manifest_root},
        }

    @classmethod
    def from_payload(cls, payload: Any, *, where: str = "run.final") -> RunFinal:
        f = Fields(payload, where=where)
        version = FINAL.version_of(f)
        last = f.obj("last_checkpoint")
        value = cls(
            steps=f.integer("steps", minimum=0),
            tokens=f.integer("tokens", minimum=0),
            final_metrics=f.numbers("final_metrics"),
            last_manifest_root=last.digest("manifest_root"),
            schema=FINAL.schema(version),
        )
        last.exactly()
        f.exactly()
        return value
