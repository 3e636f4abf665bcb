"""Verification of software quotes against reference values and caller expectations.

:func:`verify_quote` returns None or raises the :class:`attestation.errors.VerificationError`
subclass of the first check that fails. The checks, in order:

  1. the endorsement names a trusted platform root              UntrustedRootError
  2. that root signed the endorsement                            EndorsementSignatureError
  3. the endorsement is valid at the time asked about            EndorsementValidityError
  4. the endorsed attestation key is the enrolled one (if named)  UnenrolledKeyError
     and it signed the quote                                     QuoteSignatureError
  5. the quote's tee_type and svn are those endorsed              EndorsementMismatchError
  6. tee_type is "software" (never a hardware claim)             TeeTypeError
  7. the debug flag is off                                       DebugModeError
  8. svn >= the policy minimum                                   SecurityVersionError
  9. launch measurement == the reference measurement             LaunchMeasurementMismatchError
 10. replaying the event log gives the quoted registers          EventLogReplayError
 11. nonce == the expected nonce (freshness)                     NonceMismatchError
 12. report_data == the expected binding                         ReportDataMismatchError

Authenticity (1-4) comes before any claim is read, so an unsigned or forged quote is never
judged on its contents. The nonce is compared before report_data (which also hashes it) so a
replayed quote is reported as stale rather than as a binding mismatch.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from attestation.attester import SOFTWARE_TEE_TYPE, QuoteExpectations
from attestation.endorsement import Endorsement
from attestation.errors import (
    DebugModeError,
    EndorsementMismatchError,
    EndorsementSignatureError,
    EndorsementValidityError,
    EventLogReplayError,
    LaunchMeasurementMismatchError,
    NonceMismatchError,
    QuoteSignatureError,
    ReportDataMismatchError,
    SecurityVersionError,
    SignatureError,
    TeeTypeError,
    UnenrolledKeyError,
    UntrustedRootError,
)
from attestation.keys import PublicKey
from attestation.measurement import REGISTER_SIZE
from attestation.quote import Quote


@dataclass(frozen=True, kw_only=True)
class SoftwarePolicy:
    """Reference values a software quote is judged against, fixed before the run (they are
    recorded in the run's genesis entry).

    There is deliberately no list of acceptable TEE types: this policy accepts "software" and
    nothing else, so no configuration can make a software-signed quote pass as hardware.
    """

    platform_roots: tuple[PublicKey, ...]
    """Platform root keys trusted to endorse attestation keys."""
    launch_measurement: bytes
    """The reference launch measurement (48 bytes)."""
    minimum_svn: int = 0
    """Lowest acceptable security version number."""
    attestation_key: PublicKey | None = None
    """The attestation key enrolled for this attester, if one was: a quote by another key is
    refused even when a trusted root endorsed that key."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "platform_roots", tuple(self.platform_roots))
        if not self.platform_roots:
            raise ValueError("platform_roots: expected at least one trusted root, got none")
        if len(self.launch_measurement) != REGISTER_SIZE:
            raise ValueError(
                f"launch_measurement: expected {REGISTER_SIZE} "
                f"bytes, got {len(self.launch_measurement)}"
            )
        if self.minimum_svn < 0:
            raise ValueError(f"minimum_svn: expected >= 0, got {self.minimum_svn}")


class SoftwareQuoteVerifier:
    """:class:`attestation.attester.QuoteVerifier` for quotes of the software attester."""

    def __init__(self, policy: SoftwarePolicy) -> None:
        self.policy = policy

    def verify(self, quote: bytes, expected: QuoteExpectations) -> None:
        verify_quote(Quote.from_json(quote), policy=self.policy, expected=expected)


def verify_quote(quote: Quote, *, policy: SoftwarePolicy, expected: QuoteExpectations) -> None:
    """Check ``quote`` against ``policy`` and ``expected``; see the module doc for the checks."""
    _verify_endorsement(quote.endorsement, roots=policy.platform_roots, at=expected.at)
    body = quote.body
    endorsed = quote.endorsement.body

    # 4. The quote is signed by the endorsed attestation key, which is the enrolled one: a root
    # may endorse many keys, but only the enrolled key proved possession for this attester.
    enrolled = policy.attestation_key
    if enrolled is not None and enrolled.raw != endorsed.attestation_key.raw:
        raise UnenrolledKeyError(
            f"quote: expected the enrolled attestation key {enrolled.vkey}, "
            f"got a quote by {endorsed.attestation_key.vkey}"
        )
    try:
        endorsed.attestation_key.verify(quote.signature, body.signed_message())
    except SignatureError:
        raise QuoteSignatureError(
            f"quote: expected a signature by the endorsed attestation key "
            f"{endorsed.attestation_key.vkey}, got one that does not verify"
        ) from None

    # 5. The key may only speak for the platform type and security version it was endorsed for.
    if (body.tee_type, body.svn) != (endorsed.tee_type, endorsed.svn):
        raise EndorsementMismatchError(
            f"quote: expected tee_type {endorsed.tee_type!r} svn {endorsed.svn} as endorsed, "
            f"got tee_type {body.tee_type!r} svn {body.svn}"
        )

    # 6. Only software quotes are judged here; a hardware claim needs that hardware's verifier.
    if body.tee_type != SOFTWARE_TEE_TYPE:
        raise TeeTypeError(f"quote: expected tee_type {SOFTWARE_TEE_TYPE!r}, got {body.tee_type!r}")

    # 7. A debug attester lets its host inspect and alter it, so its claims mean nothing.
    if body.debug:
        raise DebugModeError("quote: expected debug false, got true")

    # 8. Security version.
    if body.svn < policy.minimum_svn:
        raise SecurityVersionError(f"quote: expected svn >= {policy.minimum_svn}, got {body.svn}")

    # 9. Launch measurement against the reference.
    if not hmac.compare_digest(body.launch_measurement, policy.launch_measurement):
        raise LaunchMeasurementMismatchError(
            f"quote: expected launch measurement {policy.launch_measurement.hex()}, "
            f"got {body.launch_measurement.hex()}"
        )

    # 10. Runtime registers: the event log must replay to exactly the quoted values.
    replayed = expected.event_log.replay(expected.initial_registers)
    for index, (want, got) in enumerate(zip(replayed, body.registers, strict=True)):
        if want != got:
            raise EventLogReplayError(
                f"quote: expected register {index} = {want.hex()} from replaying "
                f"{len(expected.event_log.events)} event(s), got {got.hex()}"
            )

    # 11. Freshness: the quote answers this verifier's nonce, not an earlier one.
    if not hmac.compare_digest(body.nonce, expected.nonce):
        raise NonceMismatchError(
            f"quote: expected nonce {expected.nonce.hex()}, got {body.nonce.hex()}"
        )

    # 12. Binding to the ledger position and statement.
    if not hmac.compare_digest(body.report_data, expected.report_data):
        raise ReportDataMismatchError(
            f"quote: expected report_data {expected.report_data.hex()}, "
            f"got {body.report_data.hex()}"
        )


def _verify_endorsement(
    endorsement: Endorsement, *, roots: Sequence[PublicKey], at: datetime
) -> None:
    body = endorsement.body
    # 1. The issuer must be one of the roots we were given. The issuer field is only a hint:
    # trust comes from the policy, and step 2 proves the named root really signed.
    trusted = [root for root in roots if root.raw == body.issuer.raw]
    if not trusted:
        names = ", ".join(root.vkey for root in roots)
        raise UntrustedRootError(
            f"endorsement: expected an issuer among the trusted platform roots [{names}], "
            f"got {body.issuer.vkey}"
        )

    # 2. The endorsement is signed by that root.
    try:
        trusted[0].verify(endorsement.signature, body.signed_message())
    except SignatureError:
        raise EndorsementSignatureError(
            f"endorsement: expected a signature by platform root {trusted[0].vkey}, "
            "got one that does not verify"
        ) from None

    # 3. Validity period.
    if at.tzinfo is None:
        raise ValueError(f"at: expected a timezone-aware datetime, got {at.isoformat()}")
    if not body.not_before <= at <= body.not_after:
        raise EndorsementValidityError(
            f"endorsement: expected a check time within {body.not_before.isoformat()} .. "
            f"{body.not_after.isoformat()}, got {at.isoformat()}"
        )
