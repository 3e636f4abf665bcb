"""Under the one-step delay a step applies the previous round from the payloads its state
before holds; reproduce holds them to the contributions the previous step's clusters signed
(veritrain/audit/contributions.py ``in_flight_problems``): an operator who edits a pending
payload in a checkpoint's outer state, after the step, is named in any mode."""

from __future__ import annotations

from records.outer_step import ContributionRef
from trainer.recorder import AppliedRound
from veritrain.audit.contributions import in_flight_problems

SIGNED = {(0, 0): "a" * 64, (0, 1): "b" * 64, (1, 0): "c" * 64, (1, 1): "d" * 64}


def applied(round_: int, digests: dict[tuple[int, int], str]) -> AppliedRound:
    return AppliedRound(
        round=round_,
        contribution_digests=[
            ContributionRef(cluster=c, stage=s, digest=d) for (c, s), d in sorted(digests.items())
        ],
        anomalies=(),
        payload_bytes=1,
        rank=4,
        bits=2,
    )


def test_the_signed_payloads_applied_late_pass() -> None:
    assert in_flight_problems(SIGNED, 3, [applied(3, SIGNED), applied(4, {})]) == []


def test_a_pending_payload_edited_in_the_state_is_named() -> None:
    edited = {**SIGNED, (1, 0): "e" * 64}

    problems = in_flight_problems(SIGNED, 3, [applied(3, edited)])

    assert problems == [
        "round 3 applied late: cluster 1 stage 0's payload in the state before is "
        "eeeeeeeeeeeeeeee…, the contribution it signed cccccccccccccccc… (the outer state was "
        "edited after the step)"
    ]


def test_a_payload_dropped_from_the_state_is_named() -> None:
    without = {k: v for k, v in SIGNED.items() if k != (0, 1)}

    problems = in_flight_problems(SIGNED, 3, [applied(3, without)])

    assert (
        len(problems) == 1
        and "cluster 0 stage 1's payload in the state before is None" in (problems[0])
    )


def test_a_blocking_run_applies_no_round_late() -> None:
    assert in_flight_problems(SIGNED, 3, [applied(4, {(0, 0): "f" * 64})]) == []
