"""The log side: pushing a run's tree heads to witnesses over real HTTP (uvicorn on
loopback), storing what comes back, serving it, and surviving witnesses that are down,
behind, or refuse."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from unit.ledger.witness_helpers import SmallLog, serve_in_thread, small_log

from attestation.keys import COSIGNATURE_V1_ALGORITHM, SigningKey
from ledger.cosignature import cosignatures_in
from ledger.db import create_engine, upgrade
from ledger.models import Cosignature
from ledger.witness import TrustedLogs
from veritrain.bench.server import free_port
from veritrain.settings import SettingsError, load_settings
from veritrain.witnesses.endpoints import WitnessEndpoint
from veritrain.witnesses.push import BackgroundPusher, PushPolicy, push_latest, push_tree_head
from web.app import create_app
from web.settings import AppSettings
from web.witness_app import WitnessSettings, create_witness_app

FAST = PushPolicy(timeout_s=2.0, attempts=2, backoff_s=0.05)


@dataclass
class RunningWitness:
    key: SigningKey
    endpoint: WitnessEndpoint


@pytest.fixture
def log(tmp_path: Path) -> SmallLog:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    upgrade(url)
    return small_log(url, entries=5)


@pytest.fixture
def witnesses(tmp_path: Path, log: SmallLog) -> Iterator[list[RunningWitness]]:
    running = []
    with ExitStack() as stack:
        for name in ("w1", "w2"):
            key = SigningKey.generate(
                f"witness.test/{name}", signature_type=COSIGNATURE_V1_ALGORITHM
            )
            url = f"sqlite:///{tmp_path / f'{name}.db'}"
            upgrade(url)
            app = create_witness_app(
                WitnessSettings(key=key, database_url=url, logs=TrustedLogs([log.vkey]))
            )
            base = stack.enter_context(serve_in_thread(app))
            running.append(
                RunningWitness(key=key, endpoint=WitnessEndpoint(vkey=key.public.vkey, url=base))
            )
        yield running


def endpoints(witnesses: list[RunningWitness]) -> list[WitnessEndpoint]:
    return [w.endpoint for w in witnesses]


def test_two_witnesses_cosign_each_new_head_and_the_api_serves_their_lines(
    log: SmallLog, witnesses: list[RunningWitness]
) -> None:
    first = push_latest(log.ledger, log.run_id, endpoints(witnesses), policy=FAST)
    assert [(o.witness, o.status, o.detail) for o in first.outcomes] == [
        ("witness.test/w1", "cosigned", "cosigned size 5 (from 0)"),
        ("witness.test/w2", "cosigned", "cosigned size 5 (from 0)"),
    ]
    log.grow(3)
    second = push_latest(log.ledger, log.run_id, endpoints(witnesses), policy=FAST)
    assert [o.detail for o in second.outcomes] == ["cosigned size 8 (from 5)"] * 2
    assert second.ok and second.cosigners == ["witness.test/w1", "witness.test/w2"]

    # The stored lines are served with the head they cosign, and verify.
    note = log.ledger.cosigned_tree_head(log.run_id).note
    found = cosignatures_in(note, [w.key.public for w in witnesses])
    assert sorted(v.key.name for v in found) == ["witness.test/w1", "witness.test/w2"]
    settings = AppSettings(
        database_url=_url(log), store_url=f"file://{Path(_path(log)).parent / 'objects'}"
    )
    with TestClient(create_app(settings)) as api:
        served = api.get(f"/api/v1/runs/{log.run_id}/log/checkpoint")
        assert served.text == note
        assert served.headers["cache-control"] == "public, max-age=5"  # the newest may gain more
        older = api.get(f"/api/v1/runs/{log.run_id}/log/checkpoint", params={"size": 5})
        assert len(cosignatures_in(older.text, [w.key.public for w in witnesses])) == 2
        assert older.headers["cache-control"].endswith("immutable")
    # A push of a head both already cosigned sends nothing.
    third = push_latest(log.ledger, log.run_id, endpoints(witnesses), policy=FAST)
    assert [o.status for o in third.outcomes] == ["up-to-date", "up-to-date"]


def test_a_lost_answer_is_recovered_from_the_409_size(
    log: SmallLog, witnesses: list[RunningWitness]
) -> None:
    push_latest(log.ledger, log.run_id, endpoints(witnesses), policy=FAST)
    # The ledger loses what w1 returned (a crash between the witness's commit and ours).
    with log.ledger.engine.begin() as conn:
        conn.execute(
            sa.delete(Cosignature).where(Cosignature.witness_key == witnesses[0].endpoint.vkey)
        )
    log.grow(2)

    result = push_latest(log.ledger, log.run_id, endpoints(witnesses), policy=FAST)

    # w1 answered 409 "5", and the retry carried the proof from 5.
    assert [o.detail for o in result.outcomes] == ["cosigned size 7 (from 5)"] * 2
    assert log.ledger.witnessed_size(log.run_id, witnesses[0].endpoint.vkey) == 7


def test_a_witness_that_is_down_is_reported_and_caught_up_later(
    log: SmallLog, witnesses: list[RunningWitness]
) -> None:
    down = WitnessEndpoint(vkey=witnesses[1].endpoint.vkey, url=f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    result = push_latest(log.ledger, log.run_id, [witnesses[0].endpoint, down], policy=FAST)
    took = time.monotonic() - started

    assert [o.status for o in result.outcomes] == ["cosigned", "unreachable"]
    assert "no answer after 2 attempts: ConnectError" in result.outcomes[1].detail
    assert not result.ok and result.cosigners == ["witness.test/w1"]
    assert took < 5  # bounded: refused connections, two attempts, 50 ms backoff
    # Back up: the next push brings it from 0 to the newest head.
    log.grow(1)
    again = push_latest(log.ledger, log.run_id, endpoints(witnesses), policy=FAST)
    assert [o.detail for o in again.outcomes] == [
        "cosigned size 6 (from 5)",
        "cosigned size 6 (from 0)",
    ]


def test_a_witness_that_saw_a_larger_tree_is_reported_as_a_rollback(
    log: SmallLog, witnesses: list[RunningWitness]
) -> None:
    log.grow(2)
    push_latest(log.ledger, log.run_id, endpoints(witnesses), policy=FAST)  # both at 7
    # Our record of w1 is lost, and the log shows it an older head (a rollback to size 4).
    with log.ledger.engine.begin() as conn:
        conn.execute(
            sa.delete(Cosignature).where(Cosignature.witness_key == witnesses[0].endpoint.vkey)
        )

    result = push_tree_head(log.ledger, log.run_id, endpoints(witnesses)[:1], size=4, policy=FAST)

    [outcome] = result.outcomes
    assert outcome.status == "refused" and outcome.http_status == 409
    assert (
        "cosigned size 7, beyond this head (4): the log was rolled back or forked" in outcome.detail
    )


def roll_back(log: SmallLog, size: int) -> None:
    """What an operator holding the database does: drop every entry, tree head and
    cosignature past ``size``, and serve the head of ``size`` with the cosignatures it kept."""
    from ledger.models import Entry, Run, TreeHead

    with log.ledger.engine.begin() as conn:
        conn.execute(sa.delete(Cosignature).where(Cosignature.size > size))
        conn.execute(sa.delete(TreeHead).where(TreeHead.run_id == log.run_id, TreeHead.size > size))
        conn.execute(sa.delete(Entry).where(Entry.run_id == log.run_id, Entry.index >= size))
        conn.execute(sa.update(Run).where(Run.id == log.run_id).values(size=size))


def test_a_log_rolled_back_to_a_head_the_witnesses_once_cosigned_is_not_up_to_date(
    log: SmallLog, witnesses: list[RunningWitness], caplog: pytest.LogCaptureFixture
) -> None:
    assert push_latest(log.ledger, log.run_id, endpoints(witnesses), policy=FAST).ok  # at 5
    log.grow(2)
    assert push_latest(log.ledger, log.run_id, endpoints(witnesses), policy=FAST).ok  # at 7
    roll_back(log, 5)
    assert log.ledger.latest_tree_head(log.run_id).size == 5
    assert log.ledger.witnessed_size(log.run_id, witnesses[0].endpoint.vkey) == 5

    result = push_latest(log.ledger, log.run_id, endpoints(witnesses), policy=FAST)

    # Our table says "cosigned 5"; the witnesses say they hold 7: a rollback, not "up to date".
    assert not result.ok and result.cosigners == []
    assert [(o.status, o.detail) for o in result.outcomes] == [
        (
            "refused",
            "the witness has cosigned size 7, beyond this head (5): the log was rolled back or "
            "forked",
        )
    ] * 2
    assert "rolled back or forked" in caplog.text and "ERROR" in caplog.text


def test_no_witnesses_costs_nothing(tmp_path: Path) -> None:
    # Not even a database read: the ledger below has no schema at all.
    from ledger.service import Ledger

    ledger = Ledger(create_engine(f"sqlite:///{tmp_path / 'empty.db'}"))
    result = push_latest(ledger, "any-run", [])
    assert (result.size, result.outcomes, result.ok) == (0, (), True)
    pusher = BackgroundPusher(ledger, [])
    pusher.notify("any-run")
    pusher.close()
    assert pusher._thread is None


@pytest.mark.serial  # a 50 ms bound on notify(): tests beside it on 2 cores can exceed it
def test_the_background_pusher_never_blocks_and_pushes_the_newest_head(
    log: SmallLog, witnesses: list[RunningWitness]
) -> None:
    pusher = BackgroundPusher(log.ledger, endpoints(witnesses), policy=FAST)
    for _ in range(3):
        log.grow(1)
        started = time.monotonic()
        pusher.notify(log.run_id)
        assert time.monotonic() - started < 0.05
    pusher.close(timeout_s=30)

    result = pusher.results[log.run_id]
    assert result.size == 8 and result.ok
    assert log.ledger.cosignatures(log.run_id)[0].size == 8


def test_a_witness_answering_with_a_wrong_key_is_invalid_and_nothing_is_stored(
    log: SmallLog, witnesses: list[RunningWitness]
) -> None:
    # Configured with another key than the one the witness signs with.
    wrong = SigningKey.generate("witness.test/w1", signature_type=COSIGNATURE_V1_ALGORITHM)
    endpoint = WitnessEndpoint(vkey=wrong.public.vkey, url=witnesses[0].endpoint.url)

    [outcome] = push_latest(log.ledger, log.run_id, [endpoint], policy=FAST).outcomes

    assert outcome.status == "invalid"
    assert "expected a cosignature by witness.test/w1" in outcome.detail
    assert log.ledger.cosignatures(log.run_id) == []


def test_veritrain_witnesses_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    w1 = SigningKey.generate("w1.example/a@b", signature_type=COSIGNATURE_V1_ALGORITHM).public.vkey
    w2 = SigningKey.generate("w2.example", signature_type=COSIGNATURE_V1_ALGORITHM).public.vkey
    monkeypatch.setenv(
        "VERITRAIN_WITNESSES", f" {w1}@http://127.0.0.1:7380/ ,{w2}@https://w2.example/prefix\n"
    )
    assert [(w.name, w.url) for w in load_settings().witnesses] == [
        ("w1.example/a@b", "http://127.0.0.1:7380"),
        ("w2.example", "https://w2.example/prefix"),
    ]
    assert (
        load_settings().witnesses[1].add_checkpoint_url
        == "https://w2.example/prefix/add-checkpoint"
    )

    log_key = SigningKey.generate("log.example").public.vkey
    for value, says in [
        (f"{w1}", "expected VKEY@URL"),
        (f"{w1}@ftp://x", "expected an http:// or https:// URL"),
        (f"{log_key}@http://x", "expected a witness verifier key (signature type 0x04"),
        (f"{w1}@http://x {w1}@http://y", "is listed twice"),
    ]:
        monkeypatch.setenv("VERITRAIN_WITNESSES", value)
        with pytest.raises(SettingsError) as info:
            load_settings()
        assert str(info.value).startswith("VERITRAIN_WITNESSES: ") and says in str(info.value)
        assert "\n" not in str(info.value)
    monkeypatch.delenv("VERITRAIN_WITNESSES")
    assert load_settings().witnesses == ()


def test_a_witness_behind_a_slow_network_times_out_within_the_policy(log: SmallLog) -> None:
    # A listening socket that never answers: the request times out, it is retried, reported.
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        key = SigningKey.generate("witness.test/slow", signature_type=COSIGNATURE_V1_ALGORITHM)
        endpoint = WitnessEndpoint(
            vkey=key.public.vkey, url=f"http://127.0.0.1:{silent.getsockname()[1]}"
        )
        started = time.monotonic()
        [outcome] = push_latest(
            log.ledger,
            log.run_id,
            [endpoint],
            policy=PushPolicy(timeout_s=0.3, attempts=2, backoff_s=0.05),
        ).outcomes
        assert outcome.status == "unreachable" and "ReadTimeout" in outcome.detail
        assert time.monotonic() - started < 3


def _url(log: SmallLog) -> str:
    return str(log.ledger.engine.url.render_as_string(hide_password=False))


def _path(log: SmallLog) -> str:
    return str(log.ledger.engine.url.database)
