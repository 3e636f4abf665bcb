"""A valid software-attestation scenario that tests bend one detail at a time.

Negative tests of the quote verifier must each trip exactly one check: :class:`Scenario` holds
one consistent set of keys, measurements, events, nonce and binding, and its helpers make a
quote, expectations and policy from it with only the named fields changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

from attestation.attester import SOFTWARE_TEE_TYPE, QuoteExpectations
from attestation.endorsement import Endorsement, endorse
from attestation.keys import SigningKey
from attestation.measurement import (
    OUTER_STEP_EVENT,
    OUTER_STEP_REGISTER,
    Event,
    EventLog,
    launch_measurement,
)
from attestation.quote import Quote, QuoteBody, report_data, sign_quote
from attestation.verifier import SoftwarePolicy

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)


def step_digest(step: int) -> bytes:
    """A stand-in statement digest for outer step ``step``."""
    return hashlib.sha256(f"statement {step}".encode()).digest()


@dataclasses.dataclass
class Scenario:
    root: SigningKey
    attestation_key: SigningKey
    launch: bytes
    events: EventLog
    nonce: bytes
    prev_leaf_hash: bytes
    statement_digest: bytes
    svn: int = 2

    @property
    def report_data(self) -> bytes:
        return report_data(self.nonce, self.prev_leaf_hash, self.statement_digest)

    def endorsement(self, **overrides: Any) -> Endorsement:
        fields: dict[str, Any] = {
            "platform_root": self.root,
            "attestation_key": self.attestation_key.public,
            "tee_type": SOFTWARE_TEE_TYPE,
            "svn": self.svn,
            "not_before": NOW - timedelta(days=1),
            "not_after": NOW + timedelta(days=30),
        }
        fields.update(overrides)
        return endorse(**fields)

    def body(self, **overrides: Any) -> QuoteBody:
        fields: dict[str, Any] = {
            "tee_type": SOFTWARE_TEE_TYPE,
            "svn": self.svn,
            "debug": False,
            "launch_measurement": self.launch,
            "registers": self.events.replay(),
            "report_data": self.report_data,
            "nonce": self.nonce,
        }
        fields.update(overrides)
        return QuoteBody(**fields)

    def quote(
        self,
        *,
        endorsement: Endorsement | None = None,
        signer: SigningKey | None = None,
        **body_overrides: Any,
    ) -> Quote:
        body = self.body(**body_overrides)
        endorsement = endorsement or self.endorsement()
        quote = sign_quote(body, attestation_key=self.attestation_key, endorsement=endorsement)
        if signer is not None:  # a signature by some other key, under the same endorsement
            quote = dataclasses.replace(quote, signature=signer.sign(body.signed_message()))
        return quote

    def expected(self, **overrides: Any) -> QuoteExpectations:
        fields: dict[str, Any] = {
            "nonce": self.nonce,
            "report_data": self.report_data,
            "event_log": self.events,
            "at": NOW,
        }
        fields.update(overrides)
        return QuoteExpectations(**fields)

    def policy(self, **overrides: Any) -> SoftwarePolicy:
        fields: dict[str, Any] = {
            "platform_roots": (self.root.public,),
            "launch_measurement": self.launch,
            "minimum_svn": self.svn,
        }
        fields.update(overrides)
        return SoftwarePolicy(**fields)


def make_scenario() -> Scenario:
    """Three outer steps extended into the outer-step register, plus one config event in
    register 1, so reordering, dropping and adding events all change a register."""
    events = EventLog(
        (
            Event(register=1, event_type="config", digest=hashlib.sha384(b"config").digest()),
            *(
                Event(
                    register=OUTER_STEP_REGISTER, event_type=OUTER_STEP_EVENT, digest=step_digest(t)
                )
                for t in (1, 2, 3)
            ),
        )
    )
    return Scenario(
        root=SigningKey.generate("platform-root"),
        attestation_key=SigningKey.generate("attester"),
        launch=launch_measurement(
            code_digest="11" * 32, dependency_digest="22" * 32, config_digest="33" * 32
        ),
        events=events,
        nonce=hashlib.sha256(b"signed tree head 7").digest(),
        prev_leaf_hash=hashlib.sha256(b"leaf 6").digest(),
        statement_digest=step_digest(3),
    )
