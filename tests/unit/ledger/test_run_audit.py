"""The pure run audit (what `veritrain verify --api` runs on data fetched over HTTP): every
way a log can be wrong is caught and reported at the first bad entry."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from attestation.canonical import canonical_json
from attestation.keys import SigningKey
from ledger.audit import audit_run_log, check_metrics
from ledger.envelope import build_body
from ledger.errors import VerificationError
from ledger.merkle import leaf_hash, root_hash
from ledger.records import MetricPoint
from ledger.tlog_checkpoint import Checkpoint, sign_checkpoint

RUN = "r1"
ORIGIN = f"veritrain.local/runs/{RUN}"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Log:
    key: SigningKey = field(default_factory=lambda: SigningKey.generate(ORIGIN))
    bodies: list[bytes] = field(default_factory=list)

    def add(self, kind: str, payload: dict[str, object]) -> None:
        prev = leaf_hash(self.bodies[-1]) if self.bodies else None
        self.bodies.append(
            build_body(
                kind=kind,
                run_id=RUN,
                index=len(self.bodies),
                prev=prev,
                recorded_at=T0 + timedelta(seconds=len(self.bodies)),
                payload=payload,
            )
        )

    def head(self, bodies: list[bytes] | None = None, key: SigningKey | None = None) -> str:
        leaves = [leaf_hash(b) for b in (self.bodies if bodies is None else bodies)]
        checkpoint = Checkpoint(origin=ORIGIN, size=len(leaves), root_hash=root_hash(leaves))
        return sign_checkpoint(checkpoint, key or self.key)

    @property
    def vkey(self) -> str:
        return self.key.public.vkey


def make_log(steps: int = 6, final: bool = True) -> Log:
    log = Log()
    log.add("run.genesis", {"seed": 1})
    for t in range(steps):
        log.add("outer_step", {"t": t, "metrics": {"loss": 1.0 / (t + 1)}})
    if final:
        log.add("run.final", {})
    return log


def failure(log: Log, bodies: list[bytes], head: str | None = None) -> VerificationError:
    with pytest.raises(VerificationError) as caught:
        audit_run_log(RUN, bodies, head or log.head(), [log.vkey])
    return caught.value


def rewrite(body: bytes, **changes: object) -> bytes:
    return canonical_json({**json.loads(body), **changes})


def test_an_intact_log_audits() -> None:
    log = make_log()
    summary = audit_run_log(RUN, log.bodies, log.head(), [log.vkey])
    assert (summary.size, summary.finished, summary.origin) == (8, True, ORIGIN)
    assert summary.kinds == {"run.genesis": 1, "outer_step": 6, "run.final": 1}


def test_an_edited_payload_is_reported_at_the_edited_entry() -> None:
    log = make_log()
    bodies = list(log.bodies)
    bodies[3] = rewrite(bodies[3], payload={"t": 2, "metrics": {"loss": 0.0001}})
    error = failure(log, bodies)
    assert error.index == 3
    assert str(error).startswith("entry 3: altered")


def test_an_edited_prev_is_reported_at_the_entry_that_records_it() -> None:
    log = make_log()
    bodies = list(log.bodies)
    bodies[4] = rewrite(bodies[4], prev="00" * 32)
    error = failure(log, bodies)
    assert error.index == 4
    assert "entry 4: prev 0000" in str(error)


def test_an_edited_last_entry_is_caught_by_the_root() -> None:
    log = make_log()
    bodies = list(log.bodies)
    bodies[-1] = rewrite(bodies[-1], payload={"forged": True})
    error = failure(log, bodies)
    assert error.index == 7
    assert "root hash" in str(error)


def test_a_non_canonical_body_is_reported() -> None:
    log = make_log()
    bodies = list(log.bodies)
    bodies[2] = json.dumps(json.loads(bodies[2]), indent=1).encode()
    error = failure(log, bodies)
    assert error.index == 2 and "canonical" in str(error)


def test_deleted_and_reordered_entries_break_the_index_sequence() -> None:
    log = make_log()
    deleted = log.bodies[:4] + log.bodies[5:]
    assert failure(log, deleted).index == 4
    swapped = list(log.bodies)
    swapped[2], swapped[3] = swapped[3], swapped[2]
    error = failure(log, swapped)
    assert error.index == 2 and "expected index 2, got 3" in str(error)


def test_entries_beyond_or_short_of_the_signed_head_are_reported() -> None:
    log = make_log(final=False)
    head = log.head()
    log.add("outer_step", {"t": 99})
    error = failure(log, log.bodies, head)
    assert error.index == 7 and "not covered" in str(error)
    error = failure(log, log.bodies[:5], head)
    assert error.index == 5 and "covers 7" in str(error)


def test_an_entry_from_another_run_or_with_a_wrong_kind_is_reported() -> None:
    log = make_log()
    bodies = list(log.bodies)
    bodies[1] = rewrite(bodies[1], run="r2")
    assert "expected run 'r1'" in str(failure(log, bodies))
    bodies = list(log.bodies)
    bodies[0] = rewrite(bodies[0], kind="outer_step")
    assert "expected kind 'run.genesis'" in str(failure(log, bodies))


def test_entries_after_run_final_are_rejected_even_if_signed() -> None:
    log = make_log()
    log.add("outer_step", {"t": 7})
    error = failure(log, log.bodies)
    assert error.index == 8 and "nothing after 'run.final'" in str(error)


def test_a_head_signed_by_another_key_or_for_another_log_is_rejected() -> None:
    log = make_log()
    impostor = SigningKey.generate(ORIGIN)
    assert failure(log, log.bodies, log.head(key=impostor)).index is None
    attester = SigningKey.generate("attester.example")
    with pytest.raises(VerificationError, match="log key named"):
        audit_run_log(RUN, log.bodies, log.head(), [attester.public.vkey])
    with pytest.raises(VerificationError, match="another log"):
        audit_run_log("r2", log.bodies, log.head(), [log.vkey])


def test_metric_rows_must_repeat_the_entries() -> None:
    log = make_log()
    check_metrics(log.bodies, [MetricPoint(step=1, key="loss", value=0.5, entry_index=2)])
    with pytest.raises(VerificationError, match="entry 2: metric 'loss'") as caught:
        check_metrics(log.bodies, [MetricPoint(step=1, key="loss", value=0.25, entry_index=2)])
    assert caught.value.index == 2
