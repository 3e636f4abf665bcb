"""A second TEE back-end, for tests only: ``tee_type: "test-only"``, registered by this one
module (attestation/registry.py) -- what docs/attestation.md promises a hardware back-end
needs.

It is software, like the real software back-end, and proves no more: keys are files. What makes
it a useful second back-end is that its evidence has a format of its own, as a TDX or SEV-SNP
quote would: a DSSE envelope signed by the attestation key over a canonical-JSON report that
carries the platform root's endorsement. No caller may parse it; a recorder and a verifier that
work with it hold quotes as opaque bytes and reach back-ends through the registry only.

Import this module (``from second_tee_backend import TEST_ONLY_TEE_TYPE``) before asking the
registry for ``"test-only"``.
"""

from __future__ import annotations

import hmac
import json
import threading
from datetime import timedelta
from typing import Any

from attestation.attester import (
    Attester,
    AttesterSetup,
    QuoteExpectations,
    QuotePolicy,
    QuoteVerifier,
)
from attestation.canonical import canonical_json
from attestation.dsse import Envelope, sign_envelope, verify_envelope
from attestation.endorsement import Endorsement, endorse
from attestation.errors import (
    EndorsementSignatureError,
    EndorsementValidityError,
    EventLogReplayError,
    LaunchMeasurementMismatchError,
    NonceMismatchError,
    ParseError,
    ReportDataMismatchError,
    SecurityVersionError,
    SignatureError,
    TeeTypeError,
    UnenrolledKeyError,
    UntrustedRootError,
)
from attestation.keys import SigningKey
from attestation.measurement import (
    INITIAL_REGISTERS,
    Event,
    EventLog,
    RegisterValues,
    launch_measurement,
    replay,
)
from attestation.registry import register

TEST_ONLY_TEE_TYPE = "test-only"
REPORT_TYPE = "application/vnd.veritrain.test-only-report.v1+json"
"""The DSSE payload type of this back-end's evidence."""


class SecondAttester:
    """:class:`attestation.attester.Attester` whose quotes are DSSE-signed reports."""

    def __init__(
        self, *, key: SigningKey, endorsement: Endorsement, launch_measurement: bytes
    ) -> None:
        self._key = key
        self._endorsement = endorsement
        self._launch = launch_measurement
        self._events: list[Event] = []
        self._registers = INITIAL_REGISTERS
        self._lock = threading.Lock()

    @property
    def tee_type(self) -> str:
        return TEST_ONLY_TEE_TYPE

    @property
    def launch_measurement(self) -> bytes:
        return self._launch

    @property
    def registers(self) -> RegisterValues:
        with self._lock:
            return self._registers

    @property
    def event_log(self) -> EventLog:
        with self._lock:
            return EventLog(tuple(self._events))

    def extend(self, *, register: int, digest: bytes, event_type: str) -> Event:
        event = Event(register=register, event_type=event_type, digest=digest)
        with self._lock:
            self._registers = replay([event], self._registers)
            self._events.append(event)
        return event

    def quote(self, *, report_data: bytes, nonce: bytes) -> bytes:
        with self._lock:
            report = {
                "endorsement": self._endorsement.to_dict(),
                "launch": self._launch.hex(),
                "nonce": nonce.hex(),
                "registers": [r.hex() for r in self._registers],
                "report_data": report_data.hex(),
                "svn": self._endorsement.body.svn,
            }
        return sign_envelope(canonical_json(report), REPORT_TYPE, [self._key]).to_json()


class SecondVerifier:
    """:class:`attestation.attester.QuoteVerifier` for ``"test-only"`` evidence."""

    def __init__(self, policy: QuotePolicy) -> None:
        self.policy = policy

    def verify(self, quote: bytes, expected: QuoteExpectations) -> None:
        policy = self.policy
        envelope = Envelope.from_json(quote)
        report = _report(envelope.payload)  # not trusted until the envelope verifies below
        endorsement = Endorsement.from_dict(report["endorsement"])
        endorsed = endorsement.body
        # The endorsement: the enrolled root, its signature, valid then, for this type and key.
        if endorsed.issuer.raw != policy.platform_root.raw:
            raise UntrustedRootError(
                f"endorsement: expected issuer {policy.platform_root.vkey}, "
                f"got {endorsed.issuer.vkey}"
            )
        try:
            policy.platform_root.verify(endorsement.signature, endorsed.signed_message())
        except SignatureError:
            raise EndorsementSignatureError("endorsement: signature does not verify") from None
        if not endorsed.not_before <= expected.at <= endorsed.not_after:
            raise EndorsementValidityError(
                f"endorsement: expected validity at {expected.at.isoformat()}, got "
                f"{endorsed.not_before.isoformat()} .. {endorsed.not_after.isoformat()}"
            )
        if endorsed.tee_type != TEST_ONLY_TEE_TYPE:
            raise TeeTypeError(
                f"endorsement: expected tee_type {TEST_ONLY_TEE_TYPE!r}, got {endorsed.tee_type!r}"
            )
        if endorsed.attestation_key.raw != policy.attestation_key.raw:
            raise UnenrolledKeyError(
                f"report: expected the enrolled attestation key {policy.attestation_key.vkey}, "
                f"got one endorsed for {endorsed.attestation_key.vkey}"
            )
        # The report itself, signed by that key; then its claims.
        verify_envelope(envelope, keys=[policy.attestation_key], payload_type=REPORT_TYPE)
        if report["svn"] != endorsed.svn or report["svn"] < policy.minimum_svn:
            raise SecurityVersionError(
                f"report: expected svn {endorsed.svn} >= {policy.minimum_svn}, got {report['svn']}"
            )
        _same(
            "launch measurement",
            policy.launch_measurement,
            report["launch"],
            error=LaunchMeasurementMismatchError,
        )
        replayed = expected.event_log.replay(expected.initial_registers)
        if [r.hex() for r in replayed] != report["registers"]:
            raise EventLogReplayError("report: registers differ from the event log's replay")
        _same("nonce", expected.nonce, report["nonce"], error=NonceMismatchError)
        _same(
            "report_data",
            expected.report_data,
            report["report_data"],
            error=ReportDataMismatchError,
        )


def _report(payload: bytes) -> dict[str, Any]:
    try:
        report = json.loads(payload)
    except ValueError as exc:
        raise ParseError(f"test-only report: expected JSON, got {exc}") from None
    fields = {"endorsement", "launch", "nonce", "registers", "report_data", "svn"}
    if not isinstance(report, dict) or set(report) != fields:
        raise ParseError(f"test-only report: expected the fields {sorted(fields)}")
    return report


def _same(what: str, want: bytes, got: str, *, error: type[Exception]) -> None:
    if not hmac.compare_digest(want.hex(), got):
        raise error(f"report: expected {what} {want.hex()}, got {got}")


class SecondBackend:
    """:class:`attestation.registry.TeeBackend` for ``"test-only"``."""

    tee_type = TEST_ONLY_TEE_TYPE
    svn = 1
    assurance = "a test-only back-end: binds steps to keys, proves nothing about hardware"

    def launch_measurement(
        self, *, code_digest: str, dependency_digest: str, config_digest: str
    ) -> bytes:
        return launch_measurement(
            code_digest=code_digest,
            dependency_digest=dependency_digest,
            config_digest=config_digest,
        )

    def attester(self, setup: AttesterSetup) -> Attester:
        endorsement = endorse(
            platform_root=setup.platform_root,
            attestation_key=setup.attestation_key.public,
            tee_type=TEST_ONLY_TEE_TYPE,
            svn=self.svn,
            not_before=setup.now,
            not_after=setup.now + timedelta(days=365),
        )
        return SecondAttester(
            key=setup.attestation_key,
            endorsement=endorsement,
            launch_measurement=setup.launch_measurement,
        )

    def verifier(self, policy: QuotePolicy) -> QuoteVerifier:
        return SecondVerifier(policy)


register(SecondBackend())
