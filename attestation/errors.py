"""The attestation package's error hierarchy: callers catch :class:`AttestationError`.

Verification failures all derive from :class:`VerificationError`; each check of the quote
verifier has its own subclass so a caller (and a test) can tell *which* check failed. Every
message says what was expected and what was found.
"""

from __future__ import annotations


class AttestationError(Exception):
    """Base of every error raised by ``attestation``."""


class UnknownTeeTypeError(AttestationError):
    """No TEE back-end is registered for a TEE type (attestation/registry.py)."""


class KeyFormatError(AttestationError):
    """A key string or key file is malformed (wrong prefix, name, length or key id)."""


class VerificationError(AttestationError):
    """A signature, envelope, statement or quote does not verify. The message says what was
    expected and what was found."""


class SignatureError(VerificationError):
    """An Ed25519 signature does not verify under the given public key."""


class ParseError(VerificationError):
    """Serialized attestation data (envelope, statement, quote, endorsement, event log,
    contribution) is truncated, not canonical, or lacks a field of the right type."""


# --- DSSE envelopes -------------------------------------------------------------------------


class ThresholdError(VerificationError):
    """Fewer distinct trusted keys signed a DSSE envelope than the threshold requires."""


class PayloadTypeError(VerificationError):
    """A DSSE envelope carries a payloadType other than the one the caller expects."""


class ContributionMismatchError(VerificationError):
    """A cluster's signed contribution names a different run, step, cluster, stage or
    payload digest than the one the ledger records."""


# --- quote verification: one class per numbered check in attestation/verifier.py ------------


class UntrustedRootError(VerificationError):
    """The attestation key is endorsed by a platform root the verifier does not trust."""


class EndorsementSignatureError(SignatureError):
    """The endorsement names a trusted platform root but its signature does not verify."""


class EndorsementValidityError(VerificationError):
    """The endorsement is not valid at the time the quote is checked for."""


class QuoteSignatureError(SignatureError):
    """The quote is not signed by the endorsed attestation key."""


class UnenrolledKeyError(VerificationError):
    """The quote's endorsed attestation key is not the one enrolled for this attester."""


class EndorsementMismatchError(VerificationError):
    """The quote claims a TEE type or security version its endorsement does not vouch for."""


class TeeTypeError(VerificationError):
    """The quote's TEE type is not the one this verifier accepts (a software quote must never
    pass as hardware, nor a hardware claim be accepted from a software attester)."""


class DebugModeError(VerificationError):
    """The quote comes from an attester running in debug mode."""


class SecurityVersionError(VerificationError):
    """The quote's security version number is below the policy's minimum."""


class LaunchMeasurementMismatchError(VerificationError):
    """The launch measurement differs from the reference measurement."""


class EventLogReplayError(VerificationError):
    """Replaying the event log does not give the runtime register values in the quote."""


class NonceMismatchError(VerificationError):
    """The quote answers a different nonce (a replayed or stale quote)."""


class ReportDataMismatchError(VerificationError):
    """The quote's report_data does not bind the expected nonce, log entry and statement."""
