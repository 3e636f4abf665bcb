"""Measurements: the launch measurement, extend-only runtime registers and their event log.

Modelled on Intel TDX (MRTD for the launch state, RTMR[0..3] extended at run time) and the
TCG event-log idea: a register can only be *extended*,

    R_new = SHA-384(R_old || digest)            (TDX RTMR extend, with SHA-384)

so its value commits to the whole ordered sequence of digests extended into it. The event log
records each extension; anyone can replay it from the all-zero reset value and compare with
the registers a quote reports. Reordering, dropping or inserting an event changes the result.

The launch measurement summarises what was started: SHA-384 of the canonical JSON object
``{"code": ..., "config": ..., "dependencies": ...}`` (hex digests). Labelled fields, not bare
concatenation, so no two different inputs can produce the same measured bytes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from attestation._schema import (
    as_object,
    load_object,
    read_hex,
    read_int,
    read_list,
    read_str,
    require_fields,
)
from attestation.canonical import canonical_json
from attestation.errors import ParseError

REGISTER_COUNT = 4
"""Runtime registers per attester, as TDX's RTMR0..RTMR3."""

REGISTER_SIZE = 48
"""SHA-384 output size in bytes."""

OUTER_STEP_REGISTER = 0
"""The register the recorder extends with each outer step's statement digest."""

OUTER_STEP_EVENT = "outer_step"

EVENT_DIGEST_SIZES = frozenset({32, 48, 64})
"""An extended digest is a SHA-256, SHA-384 or SHA-512 value; nothing else is accepted so a
register never absorbs raw, variable-length data."""

RegisterValues = tuple[bytes, ...]
"""The values of all runtime registers, index = register number."""

INITIAL_REGISTERS: RegisterValues = (bytes(REGISTER_SIZE),) * REGISTER_COUNT
"""Reset value of every register: 48 zero bytes (as TDX RTMRs at TD start)."""

_HEX_DIGEST = re.compile(r"[0-9a-f]+")
_EVENT_TYPE = re.compile(r"[a-z][a-z0-9_.-]{0,63}")


def launch_measurement(*, code_digest: str, dependency_digest: str, config_digest: str) -> bytes:
    """SHA-384 launch measurement over the code, dependency and configuration digests (hex)."""
    components = {"code": code_digest, "config": config_digest, "dependencies": dependency_digest}
    for name, value in components.items():
        if _HEX_DIGEST.fullmatch(value) is None:
            raise ValueError(f"{name} digest: expected lower-case hex, got {value!r}")
    return hashlib.sha384(canonical_json(components)).digest()


def extend_register(value: bytes, digest: bytes) -> bytes:
    """One extension: SHA-384(value || digest)."""
    if len(value) != REGISTER_SIZE:
        raise ValueError(f"register value: expected {REGISTER_SIZE} bytes, got {len(value)}")
    _check_digest(digest)
    return hashlib.sha384(value + digest).digest()


@dataclass(frozen=True, kw_only=True)
class Event:
    """One register extension as recorded in the event log.

    ``event_type`` is a label for people and tools (e.g. "outer_step"); what the register
    commits to is ``digest`` and the position of the event in the log.
    """

    register: int
    event_type: str
    digest: bytes

    def __post_init__(self) -> None:
        if not 0 <= self.register < REGISTER_COUNT:
            raise ValueError(f"register: expected 0..{REGISTER_COUNT - 1}, got {self.register}")
        if _EVENT_TYPE.fullmatch(self.event_type) is None:
            raise ValueError(
                "event_type: expected a short lower-case label "
                f"like 'outer_step', got {self.event_type!r}"
            )
        _check_digest(self.digest)

    def to_dict(self) -> dict[str, Any]:
        return {"digest": self.digest.hex(), "register": self.register, "type": self.event_type}

    @classmethod
    def from_dict(cls, value: Any, *, what: str = "event") -> Event:
        obj = as_object(value, what=what)
        require_fields(obj, required={"digest", "register", "type"}, what=what)
        register = read_int(obj, "register", what=what)
        digest = read_hex(obj, "digest", what=what, sizes=EVENT_DIGEST_SIZES)
        try:
            return cls(
                register=register, event_type=read_str(obj, "type", what=what), digest=digest
            )
        except ValueError as exc:
            raise ParseError(f"{what}: {exc}") from None


@dataclass(frozen=True)
class EventLog:
    """An ordered run of events; serialised as canonical JSON ``{"events": [...]}``."""

    events: tuple[Event, ...] = ()

    def replay(self, initial: RegisterValues = INITIAL_REGISTERS) -> RegisterValues:
        return replay(self.events, initial)

    def to_json(self) -> bytes:
        return canonical_json({"events": [e.to_dict() for e in self.events]})

    @classmethod
    def from_json(cls, data: bytes) -> EventLog:
        what = "event log"
        obj = load_object(data, what=what)
        require_fields(obj, required={"events"}, what=what)
        items = read_list(obj, "events", what=what)
        return cls(
            tuple(Event.from_dict(e, what=f"{what}.events[{i}]") for i, e in enumerate(items))
        )


def replay(events: Iterable[Event], initial: RegisterValues = INITIAL_REGISTERS) -> RegisterValues:
    """Register values after extending ``initial`` with ``events`` in order.

    Pass the values a previous replay returned as ``initial`` to continue from there: a run
    of T outer steps is then replayed once, step by step, instead of T times from reset.
    """
    if len(initial) != REGISTER_COUNT or any(len(r) != REGISTER_SIZE for r in initial):
        raise ValueError(
            f"initial: expected {REGISTER_COUNT} registers of {REGISTER_SIZE} bytes, "
            f"got {[len(r) for r in initial]}"
        )
    registers = list(initial)
    for event in events:
        registers[event.register] = extend_register(registers[event.register], event.digest)
    return tuple(registers)


def _check_digest(digest: bytes) -> None:
    if len(digest) not in EVENT_DIGEST_SIZES:
        raise ValueError(f"digest: expected 32, 48 or 64 bytes, got {len(digest)}")
