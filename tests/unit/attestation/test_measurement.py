from __future__ import annotations

import hashlib

import pytest

from attestation.errors import ParseError
from attestation.measurement import (
    INITIAL_REGISTERS,
    Event,
    EventLog,
    extend_register,
    launch_measurement,
    replay,
)


def _event(register: int, label: str) -> Event:
    return Event(
        register=register, event_type="outer_step", digest=hashlib.sha256(label.encode()).digest()
    )


def test_registers_start_at_zero_and_extend_with_sha384() -> None:
    digest = hashlib.sha256(b"statement").digest()
    assert INITIAL_REGISTERS == (b"\x00" * 48,) * 4
    assert extend_register(b"\x00" * 48, digest) == hashlib.sha384(b"\x00" * 48 + digest).digest()


def test_replay_depends_on_order_and_register() -> None:
    a, b = _event(0, "a"), _event(0, "b")
    assert replay([a, b]) != replay([b, a])
    assert replay([a]) != replay([Event(register=1, event_type="outer_step", digest=a.digest)])
    assert replay([a])[1:] == INITIAL_REGISTERS[1:]


def test_replay_can_continue_from_earlier_values() -> None:
    events = [_event(t % 2, str(t)) for t in range(10)]
    registers = INITIAL_REGISTERS
    for event in events:
        registers = replay([event], registers)
    assert registers == replay(events) == EventLog(tuple(events)).replay()


def test_event_digest_must_be_a_hash_and_register_in_range() -> None:
    with pytest.raises(ValueError, match="expected 32, 48 or 64 bytes, got 5"):
        Event(register=0, event_type="outer_step", digest=b"short")
    with pytest.raises(ValueError, match=r"register: expected 0\.\.3, got 4"):
        Event(register=4, event_type="outer_step", digest=bytes(32))
    with pytest.raises(ValueError, match="event_type"):
        Event(register=0, event_type="Outer Step", digest=bytes(32))


def test_launch_measurement_covers_each_component() -> None:
    base = {"code_digest": "aa" * 32, "dependency_digest": "bb" * 32, "config_digest": "cc" * 32}
    reference = launch_measurement(**base)
    assert len(reference) == 48
    for name in base:
        changed = dict(base, **{name: "dd" * 32})
        assert launch_measurement(**changed) != reference, name
    # Components are labelled: swapping two values is a different launch.
    swapped = dict(base, code_digest=base["config_digest"], config_digest=base["code_digest"])
    assert launch_measurement(**swapped) != reference
    with pytest.raises(ValueError, match="code digest"):
        launch_measurement(**dict(base, code_digest="not hex"))


def test_event_log_json_round_trips() -> None:
    log = EventLog((_event(0, "a"), _event(3, "b")))
    data = log.to_json()
    assert data.startswith(b'{"events":[{"digest":"')
    assert EventLog.from_json(data) == log
    assert EventLog.from_json(EventLog().to_json()) == EventLog()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"events":[{"digest":"00","register":0,"type":"x"}]}', "expected 32, 48 or 64 bytes"),
        (b'{"events":[{"digest":"' + b"0" * 64 + b'","register":4,"type":"x"}]}', "register"),
        (b'{"events":[{"digest":"' + b"A" * 64 + b'","register":0,"type":"x"}]}', "lower-case hex"),
        (b'{"events":[{"digest":"' + b"0" * 64 + b'","register":true,"type":"x"}]}', "integer"),
        (b'{"events":[{"digest":"' + b"0" * 64 + b'","register":0}]}', "missing field\\(s\\) type"),
        (b'{"events":[],"extra":1}', "unexpected field\\(s\\) extra"),
        (b'{"events": []}', "canonical"),
        (b'{"events":[{"digest":"', "not valid JSON"),
    ],
)
def test_event_log_parsing_is_strict(data: bytes, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        EventLog.from_json(data)
