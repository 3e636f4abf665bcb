"""The attester interface: what the recorder and the verifier need from any TEE back-end.

Callers hold quotes as opaque bytes (stored as content-addressed objects, their digests in the
ledger) and talk to back-ends only through these two protocols, which a back-end hands out from
the registry (attestation/registry.py, keyed by TEE type). A hardware back-end (Intel TDX or
AMD SEV-SNP through Linux configfs-tsm) is added by writing one module in
``attestation/backends/`` with one :class:`Attester` and one :class:`QuoteVerifier`, without
touching the recorder or ``veritrain verify``. docs/attestation.md describes how.

The only back-end today is the software one (``attestation/backends/software.py``), which
labels everything ``tee_type: "software"``: it proves which key signed which measurements, and
nothing about hardware isolation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from attestation.keys import PublicKey, SigningKey
from attestation.measurement import INITIAL_REGISTERS, Event, EventLog, RegisterValues

SOFTWARE_TEE_TYPE = "software"


class Attester(Protocol):
    """A measured environment that can extend runtime registers and sign quotes."""

    @property
    def tee_type(self) -> str:
        """The TEE type written into every quote: "software", "tdx", "sev-snp", ..."""
        ...

    @property
    def launch_measurement(self) -> bytes:
        """The 48-byte measurement of what was launched (recorded in the run's genesis as the
        reference value)."""
        ...

    @property
    def registers(self) -> RegisterValues:
        """Current runtime register values."""
        ...

    @property
    def event_log(self) -> EventLog:
        """Every extension since launch, in order; replays to :attr:`registers`."""
        ...

    def extend(self, *, register: int, digest: bytes, event_type: str) -> Event:
        """Extend ``register`` with ``digest`` and append the event to the log."""
        ...

    def quote(self, *, report_data: bytes, nonce: bytes) -> bytes:
        """Serialized evidence over the current measurements, ``report_data`` and ``nonce``."""
        ...


@dataclass(frozen=True, kw_only=True)
class QuoteExpectations:
    """What the verifier of one quote must be told; every value comes from the caller, never
    from the quote itself."""

    nonce: bytes
    """The nonce the quote must answer (freshness): derived by the caller from state the
    attester could not predict, e.g. the previous signed tree head."""
    report_data: bytes
    """The expected binding, computed with :func:`attestation.quote.report_data`."""
    event_log: EventLog
    """Events extended since ``initial_registers``; their replay must equal the quoted
    registers."""
    initial_registers: RegisterValues = INITIAL_REGISTERS
    """Register values before ``event_log`` (reset values, or the result of replaying the
    earlier steps of the run)."""
    at: datetime
    """The time at which the attestation key's endorsement must be valid (for a recorded run,
    the time of the ledger entry holding the quote)."""


@dataclass(frozen=True, kw_only=True)
class AttesterSetup:
    """What one cluster's attester is built from (its genesis records the public halves): the
    attester-side twin of :class:`QuotePolicy`."""

    attestation_key: SigningKey
    """The key every quote is signed with."""
    platform_root: SigningKey
    """The key that endorses ``attestation_key`` (a hardware back-end's vendor chain replaces
    it)."""
    launch_measurement: bytes
    """What the attester reports as launched (a hardware back-end reports what its hardware
    measured instead)."""
    now: datetime
    """When the endorsement of ``attestation_key`` starts to be valid."""


@dataclass(frozen=True, kw_only=True)
class QuotePolicy:
    """What a run fixed before training for one attester's quotes (its genesis records every
    value): the verifier of any back-end is built from it."""

    platform_root: PublicKey
    """The key that endorses the attestation key (the software TEE's operator-held platform
    root; a hardware back-end checks its vendor's certificate chain instead)."""
    attestation_key: PublicKey
    """The attestation key enrolled for this attester: a quote by any other key is refused,
    even one the platform root endorsed."""
    launch_measurement: bytes
    """The reference launch measurement (48 bytes)."""
    minimum_svn: int
    """Lowest acceptable security version number."""


class QuoteVerifier(Protocol):
    """Checks one back-end's quotes against a policy fixed when the verifier was built."""

    def verify(self, quote: bytes, expected: QuoteExpectations) -> None:
        """Return None if ``quote`` verifies, else raise a
        :class:`attestation.errors.VerificationError` subclass naming the failed check."""
        ...
