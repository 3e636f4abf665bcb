"""The rules a run is judged by, each named with a version, as its genesis records them.

A verifier that judged an old run by today's rules would either fail an honest run or pass a
dishonest one, silently. So from genesis v2 on the genesis names every rule the run relies on
(``rules``); a genesis v1, written before, relies on the rules of its time (:data:`RULES_V1`).
``veritrain verify`` refuses a run that names a rule it does not implement, with a clear error,
and judges every other run by the rules its genesis names (veritrain/rules.py holds the
rules this veritrain implements).

A rule name is ``<namespace>.<rule>/v<n>``; a change to what a rule decides is a new version
with a new name, and the implementation of the old one stays (docs/records.md, "Versions").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from records.fields import Fields

RULE_NAME = re.compile(r"[a-z0-9]+(\.[a-z0-9-]+)+/v[1-9][0-9]*")

VERDICT_V1 = "veritrain.verdict/v1"
"""trainer/outer/verdict.py: the contribution checks (flags non_finite ... own_data) with the
thresholds of ``OuterConfig`` in the genesis' hyperparameters (docs/outer-algorithm.md §4)."""
VERDICT_V2 = "veritrain.verdict/v2"
"""The same checks, with ``direction`` judged against the round's other clusters instead of
the run's history (trainer/outer/verdict.py; honest updates decorrelate together late in a run)."""
ASSIGNMENT_V1 = "veritrain.affine-window-permutation/v1"
"""trainer/data/assignment.py: which token windows each cluster reads at each inner step (the
data manifest's ``assignment.rule`` names it too)."""
TOLERANCE_V1 = "veritrain.tolerance/v1"
"""docs/auditing.md: a re-execution off the training hardware class passes when ``metric`` is
within ``delta`` and every parameter tensor θ′ has ‖θ′ − θ_t‖ / ‖θ_t − θ_{t−1}‖ within
``parameter_distance`` (the genesis' ``verification_policy.fallback``)."""
COMMITMENTS_V1 = "veritrain.inner-commitments/v1"
"""records/commitments.py and trainer/runtime/commitments.py: per-inner-step parameter digests
and ``count-sketch-splitmix64/v1`` fingerprints of 32 numbers."""


@dataclass(frozen=True, kw_only=True)
class Rules:
    """The genesis' ``rules``: one versioned name per rule the run relies on."""

    verdict: str
    """How an applied exchange's contributions are judged (their ``verdicts``)."""
    assignment: str
    """How the data is assigned to clusters (recomputes every ``data_ranges``)."""
    tolerance: str
    """How a re-execution off the training hardware class is judged."""
    commitments: str
    """How a cluster commits to its inner steps (digest and fingerprint scheme)."""

    def to_payload(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def named(self) -> Mapping[str, str]:
        """Rule kind -> the rule's versioned name, in field order."""
        return self.to_payload()

    @classmethod
    def read(cls, f: Fields) -> Rules:
        names = {item.name: _rule(f, item.name) for item in fields(cls)}
        value = cls(**names)
        f.exactly()
        return value


def _rule(f: Fields, name: str) -> str:
    value = f.string(name, nonempty=True)
    if RULE_NAME.fullmatch(value) is None:
        raise f.fail(name, "a versioned rule name such as 'veritrain.verdict/v1'", value)
    return value


RULES_V1 = Rules(
    verdict=VERDICT_V1,
    assignment=ASSIGNMENT_V1,
    tolerance=TOLERANCE_V1,
    commitments=COMMITMENTS_V1,
)
"""The rules a genesis v1 relies on without naming them (veritrain up to 0313592)."""

IMPLIED: Mapping[int, Rules] = {1: RULES_V1}
"""Genesis schema version -> the rules a genesis of that version implies (one that has no
``rules`` field)."""
