"""The software attester driven the way the recorder will drive it: one extension and one
quote per outer step, each verified with explicit expectations."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest
from attestation_scenario import NOW, step_digest

from attestation.attester import Attester, QuoteExpectations, QuoteVerifier
from attestation.endorsement import endorse
from attestation.errors import EventLogReplayError, NonceMismatchError
from attestation.keys import SigningKey
from attestation.measurement import (
    INITIAL_REGISTERS,
    OUTER_STEP_EVENT,
    OUTER_STEP_REGISTER,
    EventLog,
    launch_measurement,
)
from attestation.quote import report_data
from attestation.software import SoftwareAttester
from attestation.verifier import SoftwarePolicy, SoftwareQuoteVerifier

LAUNCH = launch_measurement(
    code_digest="aa" * 32, dependency_digest="bb" * 32, config_digest="cc" * 32
)


def _attester(root: SigningKey) -> SoftwareAttester:
    return SoftwareAttester.create(
        platform_root=root, launch_measurement=LAUNCH, now=NOW - timedelta(hours=1)
    )


def _nonce(step: int) -> bytes:
    return hashlib.sha256(f"signed tree head before step {step}".encode()).digest()


def _leaf(step: int) -> bytes:
    return hashlib.sha256(f"leaf {step}".encode()).digest()


def test_every_step_of_a_run_verifies_with_incremental_replay() -> None:
    root = SigningKey.generate("platform-root")
    attester: Attester = _attester(root)
    verifier: QuoteVerifier = SoftwareQuoteVerifier(
        SoftwarePolicy(platform_roots=(root.public,), launch_measurement=LAUNCH, minimum_svn=1)
    )
    quotes = []
    for step in range(1, 6):
        attester.extend(
            register=OUTER_STEP_REGISTER, digest=step_digest(step), event_type=OUTER_STEP_EVENT
        )
        binding = report_data(_nonce(step), _leaf(step - 1), step_digest(step))
        quotes.append(attester.quote(report_data=binding, nonce=_nonce(step)))

    # A verifier walks the run once: each quote is checked against the events of its own step,
    # starting from the registers the previous step's replay produced.
    log = attester.event_log
    registers = INITIAL_REGISTERS
    for step, quote in enumerate(quotes, start=1):
        step_events = EventLog(log.events[step - 1 : step])
        verifier.verify(
            quote,
            QuoteExpectations(
                nonce=_nonce(step),
                report_data=report_data(_nonce(step), _leaf(step - 1), step_digest(step)),
                event_log=step_events,
                initial_registers=registers,
                at=NOW,
            ),
        )
        registers = step_events.replay(registers)
    assert registers == attester.registers


def test_quote_from_an_earlier_step_does_not_pass_for_a_later_one() -> None:
    root = SigningKey.generate("platform-root")
    attester = _attester(root)
    attester.extend(
        register=OUTER_STEP_REGISTER, digest=step_digest(1), event_type=OUTER_STEP_EVENT
    )
    binding = report_data(_nonce(1), _leaf(0), step_digest(1))
    stale = attester.quote(report_data=binding, nonce=_nonce(1))
    attester.extend(
        register=OUTER_STEP_REGISTER, digest=step_digest(2), event_type=OUTER_STEP_EVENT
    )

    verifier = SoftwareQuoteVerifier(
        SoftwarePolicy(platform_roots=(root.public,), launch_measurement=LAUNCH)
    )
    expected = QuoteExpectations(
        nonce=_nonce(2),
        report_data=report_data(_nonce(2), _leaf(1), step_digest(2)),
        event_log=attester.event_log,
        at=NOW,
    )
    with pytest.raises(EventLogReplayError):  # its registers predate step 2
        verifier.verify(stale, expected)
    replay_only_step_1 = QuoteExpectations(
        nonce=_nonce(2),
        report_data=expected.report_data,
        event_log=EventLog(attester.event_log.events[:1]),
        at=NOW,
    )
    with pytest.raises(NonceMismatchError):  # and it answers the old challenge
        verifier.verify(stale, replay_only_step_1)


def test_resumed_attester_restores_registers_from_its_event_log() -> None:
    root, key = SigningKey.generate("platform-root"), SigningKey.generate("attester")
    first = SoftwareAttester.create(
        platform_root=root, launch_measurement=LAUNCH, attestation_key=key
    )
    for step in (1, 2, 3):
        first.extend(
            register=OUTER_STEP_REGISTER, digest=step_digest(step), event_type=OUTER_STEP_EVENT
        )

    resumed = SoftwareAttester(
        attestation_key=key,
        endorsement=first.endorsement,
        launch_measurement=LAUNCH,
        event_log=EventLog.from_json(first.event_log.to_json()),
    )
    assert resumed.registers == first.registers != INITIAL_REGISTERS
    assert resumed.event_log == first.event_log


def test_software_attester_says_software_everywhere() -> None:
    attester = _attester(SigningKey.generate("platform-root"))
    quote = json.loads(attester.quote(report_data=bytes(64), nonce=bytes(32)))
    assert attester.tee_type == "software"
    assert quote["body"]["tee_type"] == "software"
    assert quote["endorsement"]["body"]["tee_type"] == "software"
    assert quote["body"]["debug"] is False


def test_software_attester_refuses_a_hardware_endorsement() -> None:
    root, key = SigningKey.generate("platform-root"), SigningKey.generate("attester")
    tdx = endorse(
        platform_root=root,
        attestation_key=key.public,
        tee_type="tdx",
        svn=1,
        not_before=NOW,
        not_after=NOW + timedelta(days=1),
    )
    with pytest.raises(ValueError, match="never claims hardware"):
        SoftwareAttester(attestation_key=key, endorsement=tdx, launch_measurement=LAUNCH)


def test_software_attester_refuses_an_endorsement_of_another_key() -> None:
    root = SigningKey.generate("platform-root")
    other = _attester(root)
    with pytest.raises(ValueError, match="expected one for"):
        SoftwareAttester(
            attestation_key=SigningKey.generate("attester"),
            endorsement=other.endorsement,
            launch_measurement=LAUNCH,
        )


def test_endorsement_defaults_to_one_year_from_now() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    attester = SoftwareAttester.create(
        platform_root=SigningKey.generate("platform-root"), launch_measurement=LAUNCH
    )
    body = attester.endorsement.body
    assert before <= body.not_before <= datetime.now(UTC)
    assert body.not_after - body.not_before == timedelta(days=365)
