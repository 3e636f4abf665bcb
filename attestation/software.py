"""The software attester: the TEE quote protocol without a TEE.

It keeps a launch measurement and extend-only registers in process memory and signs quotes
with an Ed25519 attestation key endorsed by an operator-held platform root. Every quote and
endorsement says ``tee_type: "software"``. What that proves: the holder of the endorsed key
reported these measurements, for this nonce and binding. What it does not prove: that the
process was isolated from its host, that the key could not be copied, or that the reported
measurements match the code that actually ran; anyone with the key can sign anything. A
hardware back-end closes exactly those gaps (see docs/attestation.md). Callers reach it through
the registry (attestation/registry.py, attestation/backends/software.py), never by name.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from attestation.attester import SOFTWARE_TEE_TYPE
from attestation.endorsement import Endorsement, endorse
from attestation.keys import SigningKey
from attestation.measurement import (
    INITIAL_REGISTERS,
    REGISTER_SIZE,
    Event,
    EventLog,
    RegisterValues,
    replay,
)
from attestation.quote import QuoteBody, sign_quote

SOFTWARE_SVN = 1
"""Security version of this implementation; raise it when a fix changes what quotes mean, so
verifiers can refuse quotes from older attesters with ``minimum_svn``."""

DEFAULT_VALIDITY = timedelta(days=365)


class SoftwareAttester:
    """:class:`attestation.attester.Attester` with no hardware behind it. Thread-safe."""

    def __init__(
        self,
        *,
        attestation_key: SigningKey,
        endorsement: Endorsement,
        launch_measurement: bytes,
        debug: bool = False,
        event_log: EventLog | None = None,
    ) -> None:
        """``event_log`` restores a resumed attester: registers are its replay from reset."""
        if endorsement.body.tee_type != SOFTWARE_TEE_TYPE:
            raise ValueError(
                f"endorsement: expected tee_type {SOFTWARE_TEE_TYPE!r}, got "
                f"{endorsement.body.tee_type!r} (a software attester never claims hardware)"
            )
        if endorsement.body.attestation_key != attestation_key.public:
            raise ValueError(
                f"endorsement: expected one for {attestation_key.public.vkey}, "
                f"got one for {endorsement.body.attestation_key.vkey}"
            )
        if len(launch_measurement) != REGISTER_SIZE:
            raise ValueError(
                f"launch_measurement: expected {REGISTER_SIZE} bytes, got {len(launch_measurement)}"
            )
        self._key = attestation_key
        self._endorsement = endorsement
        self._launch = launch_measurement
        self._debug = debug
        self._events = list(event_log.events) if event_log is not None else []
        self._registers = replay(self._events, INITIAL_REGISTERS)
        self._lock = threading.Lock()

    @classmethod
    def create(
        cls,
        *,
        platform_root: SigningKey,
        launch_measurement: bytes,
        attestation_key: SigningKey | None = None,
        svn: int = SOFTWARE_SVN,
        debug: bool = False,
        now: datetime | None = None,
        validity: timedelta = DEFAULT_VALIDITY,
    ) -> SoftwareAttester:
        """An attester whose key (fresh unless given) is endorsed by ``platform_root`` from
        ``now`` for ``validity``."""
        key = attestation_key or SigningKey.generate("veritrain-software-attester")
        start = now or datetime.now(UTC)
        endorsement = endorse(
            platform_root=platform_root,
            attestation_key=key.public,
            tee_type=SOFTWARE_TEE_TYPE,
            svn=svn,
            not_before=start,
            not_after=start + validity,
        )
        return cls(
            attestation_key=key,
            endorsement=endorsement,
            launch_measurement=launch_measurement,
            debug=debug,
        )

    @property
    def tee_type(self) -> str:
        return SOFTWARE_TEE_TYPE

    @property
    def endorsement(self) -> Endorsement:
        return self._endorsement

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
            body = QuoteBody(
                tee_type=SOFTWARE_TEE_TYPE,
                svn=self._endorsement.body.svn,
                debug=self._debug,
                launch_measurement=self._launch,
                registers=self._registers,
                report_data=report_data,
                nonce=nonce,
            )
        return sign_quote(body, attestation_key=self._key, endorsement=self._endorsement).to_json()
