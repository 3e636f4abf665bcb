"""The TEE back-end registry (attestation/registry.py): back-ends are found by TEE type, a new
one is one module (tests/second_tee_backend.py registers ``"test-only"`` and nothing else
changes), and a type nobody registered is refused with the registered ones named."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from attestation_scenario import NOW, step_digest
from second_tee_backend import TEST_ONLY_TEE_TYPE, SecondAttester

from attestation.attester import AttesterSetup, QuoteExpectations, QuotePolicy
from attestation.endorsement import endorse
from attestation.errors import (
    NonceMismatchError,
    ParseError,
    TeeTypeError,
    UnenrolledKeyError,
    UnknownTeeTypeError,
)
from attestation.keys import SigningKey
from attestation.measurement import OUTER_STEP_EVENT, OUTER_STEP_REGISTER, EventLog
from attestation.quote import Quote, report_data
from attestation.registry import register, registered_tee_types, tee_backend

NONCE = hashlib.sha256(b"signed tree head 4").digest()
PREV_LEAF = hashlib.sha256(b"leaf 3").digest()


def _quote_and_verify(tee_type: str) -> bytes:
    """Drive the back-end of ``tee_type`` as the recorder and ``veritrain verify`` do, through
    the registry only: one attester, one step, one quote, checked by the back-end's verifier.
    Returns the quote."""
    backend = tee_backend(tee_type)
    root, key = SigningKey.generate("platform-root"), SigningKey.generate("attester")
    launch = backend.launch_measurement(
        code_digest="11" * 32, dependency_digest="22" * 32, config_digest="33" * 32
    )
    attester = backend.attester(
        AttesterSetup(
            attestation_key=key,
            platform_root=root,
            launch_measurement=launch,
            now=NOW - timedelta(hours=1),
        )
    )
    assert attester.tee_type == tee_type
    event = attester.extend(
        register=OUTER_STEP_REGISTER, digest=step_digest(4), event_type=OUTER_STEP_EVENT
    )
    binding = report_data(NONCE, PREV_LEAF, step_digest(4))
    quote = attester.quote(report_data=binding, nonce=NONCE)
    verifier = backend.verifier(
        QuotePolicy(
            platform_root=root.public,
            attestation_key=key.public,
            launch_measurement=launch,
            minimum_svn=backend.svn,
        )
    )
    expected = QuoteExpectations(
        nonce=NONCE, report_data=binding, event_log=EventLog((event,)), at=NOW
    )
    verifier.verify(quote, expected)
    # The same verifier refuses a replay of the quote for another nonce...
    with pytest.raises(NonceMismatchError):
        verifier.verify(quote, QuoteExpectations(**{**vars(expected), "nonce": PREV_LEAF}))
    # ...and a quote by an endorsed key the run did not enrol.
    stranger = backend.verifier(
        QuotePolicy(
            platform_root=root.public,
            attestation_key=SigningKey.generate("attester").public,
            launch_measurement=launch,
            minimum_svn=backend.svn,
        )
    )
    with pytest.raises(UnenrolledKeyError):
        stranger.verify(quote, expected)
    return quote


def test_the_software_backend_is_found_by_its_type_and_its_quotes_verify() -> None:
    quote = _quote_and_verify("software")
    assert Quote.from_json(quote).body.tee_type == "software"


def test_a_second_backend_registered_by_one_module_attests_and_verifies() -> None:
    assert registered_tee_types() == ("software", TEST_ONLY_TEE_TYPE)
    evidence = _quote_and_verify(TEST_ONLY_TEE_TYPE)
    # Its evidence has a format of its own: callers hold it as opaque bytes, and each verifier
    # refuses the other's evidence.
    with pytest.raises(ParseError):
        Quote.from_json(evidence)
    software = _quote_and_verify("software")
    policy = QuotePolicy(
        platform_root=SigningKey.generate("platform-root").public,
        attestation_key=SigningKey.generate("attester").public,
        launch_measurement=bytes(48),
        minimum_svn=0,
    )
    expected = QuoteExpectations(nonce=NONCE, report_data=bytes(64), event_log=EventLog(()), at=NOW)
    with pytest.raises(ParseError):
        tee_backend("software").verifier(policy).verify(evidence, expected)
    with pytest.raises(ParseError):
        tee_backend(TEST_ONLY_TEE_TYPE).verifier(policy).verify(software, expected)


@pytest.mark.parametrize("tee_type", ["tdx", "sev-snp"])
def test_an_unregistered_tee_type_is_refused_naming_the_registered_ones(tee_type: str) -> None:
    with pytest.raises(UnknownTeeTypeError) as refused:
        tee_backend(tee_type)
    assert str(refused.value) == (
        f"tee_type {tee_type!r}: no TEE back-end is registered for it (registered: software, "
        "test-only); a back-end is one module in attestation/backends/ (docs/attestation.md)"
    )


def test_a_second_backend_for_a_registered_type_is_refused() -> None:
    class Impostor:
        tee_type = "software"
        svn = 99
        assurance = "claims to be the software back-end"

    with pytest.raises(ValueError, match="tee_type 'software': expected one back-end"):
        register(Impostor())  # type: ignore[arg-type]
    assert tee_backend("software").svn == 1


def test_a_backend_accepts_its_own_tee_type_only() -> None:
    """The test-only verifier refuses a report by a key its root endorsed for another type, as
    the software verifier refuses every type but "software" (test_verifier.py)."""
    root, key = SigningKey.generate("platform-root"), SigningKey.generate("attester")
    as_software = endorse(
        platform_root=root,
        attestation_key=key.public,
        tee_type="software",
        svn=1,
        not_before=NOW - timedelta(days=1),
        not_after=NOW + timedelta(days=1),
    )
    attester = SecondAttester(key=key, endorsement=as_software, launch_measurement=bytes(48))
    report = attester.quote(report_data=bytes(64), nonce=NONCE)
    verifier = tee_backend(TEST_ONLY_TEE_TYPE).verifier(
        QuotePolicy(
            platform_root=root.public,
            attestation_key=key.public,
            launch_measurement=bytes(48),
            minimum_svn=0,
        )
    )
    expected = QuoteExpectations(nonce=NONCE, report_data=bytes(64), event_log=EventLog(()), at=NOW)
    with pytest.raises(TeeTypeError, match="expected tee_type 'test-only', got 'software'"):
        verifier.verify(report, expected)
