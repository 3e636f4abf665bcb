"""The quote verifier: one test per check, each bending exactly one thing of a valid scenario.

Every negative test asserts the specific error class of its check. Because the other inputs
stay valid, removing the check makes the test fail: either the quote is accepted or a later
check raises a different class.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from datetime import timedelta
from typing import Any

import pytest
from attestation_scenario import NOW, Scenario

from attestation.errors import (
    DebugModeError,
    EndorsementMismatchError,
    EndorsementSignatureError,
    EndorsementValidityError,
    EventLogReplayError,
    LaunchMeasurementMismatchError,
    NonceMismatchError,
    ParseError,
    QuoteSignatureError,
    ReportDataMismatchError,
    SecurityVersionError,
    TeeTypeError,
    UnenrolledKeyError,
    UntrustedRootError,
    VerificationError,
)
from attestation.keys import SigningKey
from attestation.measurement import Event, EventLog
from attestation.quote import report_data
from attestation.verifier import SoftwareQuoteVerifier, verify_quote


def test_valid_quote_verifies_from_its_bytes(scenario: Scenario) -> None:
    quote = scenario.quote().to_json()
    SoftwareQuoteVerifier(scenario.policy()).verify(quote, scenario.expected())


# --- 1-3: the endorsement chain --------------------------------------------------------------


def test_key_endorsed_by_another_root_is_untrusted(scenario: Scenario) -> None:
    other_root = SigningKey.generate("someone-elses-root")
    quote = scenario.quote(endorsement=scenario.endorsement(platform_root=other_root))
    with pytest.raises(UntrustedRootError, match="someone-elses-root"):
        verify_quote(quote, policy=scenario.policy(), expected=scenario.expected())


def test_endorsement_claiming_a_trusted_issuer_but_signed_by_another_root_fails(
    scenario: Scenario,
) -> None:
    forged = scenario.endorsement(platform_root=SigningKey.generate("platform-root"))
    forged = dataclasses.replace(
        forged, body=dataclasses.replace(forged.body, issuer=scenario.root.public)
    )
    with pytest.raises(EndorsementSignatureError):
        verify_quote(
            scenario.quote(endorsement=forged),
            policy=scenario.policy(),
            expected=scenario.expected(),
        )


@pytest.mark.parametrize("offset", [timedelta(days=-2), timedelta(days=31)])
def test_endorsement_outside_its_validity_period_fails(
    scenario: Scenario, offset: timedelta
) -> None:
    with pytest.raises(EndorsementValidityError, match="expected a check time within"):
        verify_quote(
            scenario.quote(),
            policy=scenario.policy(),
            expected=scenario.expected(at=NOW + offset),
        )


# --- 4-5: the quote signature and what the key was endorsed for ----------------------------


def test_quote_signed_by_an_unendorsed_key_fails(scenario: Scenario) -> None:
    quote = scenario.quote(signer=SigningKey.generate("attester"))
    with pytest.raises(QuoteSignatureError):
        verify_quote(quote, policy=scenario.policy(), expected=scenario.expected())


def test_quote_by_an_endorsed_key_other_than_the_enrolled_one_fails(scenario: Scenario) -> None:
    """The trusted root endorsed the quote's key, and that key signed it -- but the run
    enrolled another attestation key for this attester."""
    enrolled = SigningKey.generate("enrolled-attester")
    with pytest.raises(
        UnenrolledKeyError,
        match=re.escape(f"expected the enrolled attestation key {enrolled.public.vkey}, got"),
    ):
        verify_quote(
            scenario.quote(),
            policy=scenario.policy(attestation_key=enrolled.public),
            expected=scenario.expected(),
        )
    # The enrolled key itself passes.
    verify_quote(
        scenario.quote(),
        policy=scenario.policy(attestation_key=scenario.attestation_key.public),
        expected=scenario.expected(),
    )


def test_quote_with_a_security_version_other_than_endorsed_fails(scenario: Scenario) -> None:
    quote = scenario.quote(svn=scenario.svn + 1)
    with pytest.raises(EndorsementMismatchError, match="svn 3"):
        verify_quote(quote, policy=scenario.policy(), expected=scenario.expected())


@pytest.mark.parametrize("hardware", ["tdx", "sev-snp"])
def test_software_key_claiming_hardware_fails(scenario: Scenario, hardware: str) -> None:
    # The software attestation key (endorsed as "software") signs a quote saying "tdx".
    quote = scenario.quote(tee_type=hardware)
    with pytest.raises(EndorsementMismatchError, match=hardware):
        verify_quote(quote, policy=scenario.policy(), expected=scenario.expected())


# --- 6-9: the claims against the policy -----------------------------------------------------


@pytest.mark.parametrize("hardware", ["tdx", "sev-snp"])
def test_hardware_quote_is_rejected_by_the_software_policy(
    scenario: Scenario, hardware: str
) -> None:
    # Even a trusted root endorsing the key *as hardware* does not make the software verifier
    # accept it: hardware claims need the hardware vendor's chain and verifier.
    quote = scenario.quote(endorsement=scenario.endorsement(tee_type=hardware), tee_type=hardware)
    with pytest.raises(TeeTypeError, match=f"expected tee_type 'software', got '{hardware}'"):
        verify_quote(quote, policy=scenario.policy(), expected=scenario.expected())


def test_debug_attester_is_rejected(scenario: Scenario) -> None:
    with pytest.raises(DebugModeError, match="expected debug false"):
        verify_quote(
            scenario.quote(debug=True), policy=scenario.policy(), expected=scenario.expected()
        )


def test_security_version_below_the_minimum_is_rejected(scenario: Scenario) -> None:
    policy = scenario.policy(minimum_svn=scenario.svn + 1)
    with pytest.raises(SecurityVersionError, match="expected svn >= 3, got 2"):
        verify_quote(scenario.quote(), policy=policy, expected=scenario.expected())


def test_launch_measurement_other_than_the_reference_is_rejected(scenario: Scenario) -> None:
    other = hashlib.sha384(b"different code").digest()
    with pytest.raises(LaunchMeasurementMismatchError, match=other.hex()):
        verify_quote(
            scenario.quote(launch_measurement=other),
            policy=scenario.policy(),
            expected=scenario.expected(),
        )


# --- 10: event-log replay -------------------------------------------------------------------


def _reordered(events: EventLog) -> EventLog:
    first, a, b, *rest = events.events
    return EventLog((first, b, a, *rest))


def _missing(events: EventLog) -> EventLog:
    return EventLog(events.events[:-1])


def _extra(events: EventLog) -> EventLog:
    extra = Event(register=0, event_type="outer_step", digest=hashlib.sha256(b"x").digest())
    return EventLog((*events.events, extra))


def _moved(events: EventLog) -> EventLog:
    last = events.events[-1]
    return EventLog((*events.events[:-1], dataclasses.replace(last, register=2)))


@pytest.mark.parametrize("tamper", [_reordered, _missing, _extra, _moved])
def test_event_log_that_does_not_replay_to_the_quoted_registers_fails(
    scenario: Scenario, tamper: object
) -> None:
    assert callable(tamper)
    expected = scenario.expected(event_log=tamper(scenario.events))
    with pytest.raises(EventLogReplayError, match="from replaying"):
        verify_quote(scenario.quote(), policy=scenario.policy(), expected=expected)


# --- 11-12: freshness and binding -----------------------------------------------------------


def test_wrong_nonce_fails(scenario: Scenario) -> None:
    # Only the nonce differs: the expected report_data is the one the quote carries.
    old_nonce = hashlib.sha256(b"signed tree head 6").digest()
    quote = scenario.quote(nonce=old_nonce)
    with pytest.raises(NonceMismatchError, match=old_nonce.hex()):
        verify_quote(quote, policy=scenario.policy(), expected=scenario.expected())


def test_replayed_quote_with_an_old_nonce_is_reported_as_stale(scenario: Scenario) -> None:
    # A genuine quote from an earlier challenge, replayed whole (nonce and its binding).
    old_nonce = hashlib.sha256(b"signed tree head 6").digest()
    old_binding = report_data(old_nonce, scenario.prev_leaf_hash, scenario.statement_digest)
    quote = scenario.quote(nonce=old_nonce, report_data=old_binding)
    with pytest.raises(NonceMismatchError):
        verify_quote(quote, policy=scenario.policy(), expected=scenario.expected())


@pytest.mark.parametrize("bent", ["prev_leaf_hash", "statement_digest"])
def test_report_data_binding_another_entry_or_statement_fails(
    scenario: Scenario, bent: str
) -> None:
    changes: dict[str, Any] = {bent: hashlib.sha256(b"elsewhere").digest()}
    other = dataclasses.replace(scenario, **changes)
    quote = scenario.quote(report_data=other.report_data)
    with pytest.raises(ReportDataMismatchError, match="expected report_data"):
        verify_quote(quote, policy=scenario.policy(), expected=scenario.expected())


# --- malformed input ------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [0.25, 0.5, 0.9, 0.999])
def test_truncated_quote_bytes_are_a_parse_error(scenario: Scenario, keep: float) -> None:
    data = scenario.quote().to_json()
    with pytest.raises(ParseError, match="quote: not valid JSON"):
        SoftwareQuoteVerifier(scenario.policy()).verify(
            data[: int(len(data) * keep)], scenario.expected()
        )


@pytest.mark.parametrize(
    ("path", "field"),
    [((), "endorsement"), (("body",), "nonce"), (("body", "measurements"), "registers")],
)
def test_quote_missing_a_field_is_a_parse_error_naming_it(
    scenario: Scenario, path: tuple[str, ...], field: str
) -> None:
    from attestation.canonical import canonical_json

    obj = scenario.quote().to_dict()
    node = obj
    for key in path:
        node = node[key]
    del node[field]
    with pytest.raises(ParseError, match=f"missing field\\(s\\) {field}"):
        SoftwareQuoteVerifier(scenario.policy()).verify(canonical_json(obj), scenario.expected())


def test_every_failure_is_a_verification_error(scenario: Scenario) -> None:
    # Callers (veritrain verify) catch one base class and report the message.
    with pytest.raises(VerificationError):
        verify_quote(
            scenario.quote(debug=True), policy=scenario.policy(), expected=scenario.expected()
        )
