"""The versioned rules this veritrain trains by and judges by (records/rules.py names them).

A new run's genesis names :data:`WRITTEN`. ``veritrain verify`` and ``veritrain reproduce``
judge a run only by rules in :data:`IMPLEMENTED`; a run whose genesis names another is refused
with :func:`require_implemented`'s error, never judged by whatever rules the code has today.
Adding a rule version (docs/records.md, "Versions"): give it a new name in records/rules.py,
keep the old implementation and dispatch on ``genesis.rules.<kind>`` where it is applied, add
the name to :data:`IMPLEMENTED`, and point :data:`WRITTEN` at it.
"""

from __future__ import annotations

from collections.abc import Mapping

from records.rules import (
    ASSIGNMENT_V1,
    COMMITMENTS_V1,
    TOLERANCE_V1,
    VERDICT_V1,
    Rules,
)
from veritrain.errors import VeritrainError

WRITTEN = Rules(
    verdict=VERDICT_V1,
    assignment=ASSIGNMENT_V1,
    tolerance=TOLERANCE_V1,
    commitments=COMMITMENTS_V1,
)
"""The rules a run trained by this code relies on (the trainer's own names: trainer/outer/
verdict.py and trainer/data/assignment.py ``RULE_NAME``)."""

IMPLEMENTED: Mapping[str, tuple[str, ...]] = {
    "verdict": (VERDICT_V1,),
    "assignment": (ASSIGNMENT_V1,),
    "tolerance": (TOLERANCE_V1,),
    "commitments": (COMMITMENTS_V1,),
}
"""Rule kind -> every version of it this veritrain can judge a run by, oldest first."""


class UnknownRule(VeritrainError):
    """The run relies on a rule (or rule version) this veritrain does not implement."""


def unimplemented(rules: Rules) -> list[str]:
    """One sentence per rule ``rules`` names that this veritrain does not implement."""
    return [
        f"the genesis names the {kind} rule {name!r}, which this veritrain does not implement "
        f"(it judges by {', '.join(IMPLEMENTED.get(kind, ())) or 'no such rule'}): "
        "the run cannot be judged by its own rules; upgrade veritrain"
        for kind, name in rules.named().items()
        if name not in IMPLEMENTED.get(kind, ())
    ]


def require_implemented(rules: Rules) -> None:
    """None, or :class:`UnknownRule` naming every rule of ``rules`` not implemented here."""
    problems = unimplemented(rules)
    if problems:
        raise UnknownRule("; ".join(problems))
