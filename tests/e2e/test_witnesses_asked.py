"""Witnesses asked directly, not through the log server (issue 23, items 1 and 8).

A rollback to a head the witnesses once cosigned: the operator keeps the cosignatures
collected at an earlier size, deletes the later entries (the last outer step and
``run.final``) and serves the old head with those cosignatures. Every signature is genuine and
the log is self-consistent, so a first-time verifier that only checks cosignatures is fooled;
a verifier that asks the witnesses themselves what they hold now (``--witness VKEY@URL``) is
not -- directly, through ``--api``, and on the command line.

A split view under another origin: the operator runs a second log for the same run id under
another origin prefix, which the witnesses accept as a new log. Asked which logs they cosign,
they name both, and a verifier that did not pin the log key fails."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e.auditor_cli import run_as_auditor_in_process
from e2e.recorded_runs import RUN_ID
from unit.ledger.witness_helpers import SmallLog, serve_in_thread, small_log

from attestation.keys import COSIGNATURE_V1_ALGORITHM, SigningKey
from ledger.db import create_engine, upgrade
from ledger.service import Ledger
from ledger.witness import TrustedLogs
from veritrain.audit.verify import Report, verify_run
from veritrain.settings import Settings
from veritrain.sources import DirectSource, RunSource
from veritrain.sources.api import ApiSource
from veritrain.witnesses.endpoints import WitnessEndpoint
from veritrain.witnesses.push import push_latest, push_tree_head
from web.settings import WebSettings
from web.witness_app import WitnessSettings, create_witness_app

ROLLED_BACK_SIZE = 5
"""genesis, data manifest, outer steps 0-2: the last step (3) and run.final are dropped."""


@dataclass
class Witnessed:
    settings: Settings
    witnesses: list[str]
    """``VKEY@URL`` of each witness."""
    endpoints: list[WitnessEndpoint]
    log_vkey: str
    """The recorded run's log key."""
    other_log: SmallLog
    """A second log for the same run id, under another origin, that the witnesses trust."""


@pytest.fixture
def witnessed(fresh_run: Settings, tmp_path: Path) -> Iterator[Witnessed]:
    """The recorded run, cosigned by two live witnesses at size 5 and then at its full size."""
    engine = create_engine(fresh_run.database_url)
    ledger = Ledger(engine)
    [log_key] = ledger.keys(RUN_ID, role="log")
    upgrade(f"sqlite:///{tmp_path / 'other.db'}")
    other_log = small_log(f"sqlite:///{tmp_path / 'other.db'}", run_id=RUN_ID, entries=5)
    with ExitStack() as stack:
        stack.callback(engine.dispose)
        endpoints = []
        for name in ("w1", "w2"):
            key = SigningKey.generate(
                f"witness.test/{name}", signature_type=COSIGNATURE_V1_ALGORITHM
            )
            url = f"sqlite:///{tmp_path / f'{name}.db'}"
            upgrade(url)
            app = create_witness_app(
                WitnessSettings(
                    key=key, database_url=url, logs=TrustedLogs([log_key.vkey, other_log.vkey])
                )
            )
            base = stack.enter_context(serve_in_thread(app))
            endpoints.append(WitnessEndpoint(vkey=key.public.vkey, url=base))
        assert push_tree_head(ledger, RUN_ID, endpoints, size=ROLLED_BACK_SIZE).ok
        assert push_latest(ledger, RUN_ID, endpoints).size == 7
        stack.callback(other_log.ledger.engine.dispose)
        yield Witnessed(
            settings=fresh_run,
            witnesses=[f"{e.vkey}@{e.url}" for e in endpoints],
            endpoints=endpoints,
            log_vkey=log_key.vkey,
            other_log=other_log,
        )


def roll_back(settings: Settings, size: int) -> None:
    """Everything past ``size`` is deleted, as if it had never been recorded."""
    with sqlite3.connect(settings.database_url.removeprefix("sqlite:///")) as db:
        db.execute("delete from cosignatures where size > ?", (size,))
        db.execute("delete from tree_heads where size > ?", (size,))
        db.execute("delete from metrics where entry_index >= ?", (size,))
        db.execute("delete from entries where idx >= ?", (size,))
        db.execute(
            "update runs set size = ?, status = 'running', finished_at = null, "
            "latest_step = (select max(step) from entries)",
            (size,),
        )


def check_1(report: Report) -> list[str]:
    return [f.message for f in report.results[1].failures]


def verify(source: RunSource, witnesses: list[str], vkey: str | None = None) -> Report:
    return verify_run(source, RUN_ID, witnesses=witnesses, quorum=2, vkey=vkey)


def test_the_honest_run_is_held_now_by_both_witnesses(witnessed: Witnessed) -> None:
    settings, witnesses = witnessed.settings, witnessed.witnesses
    with DirectSource(settings) as source:
        report = verify(source, witnesses)
    assert report.ok, report.render()
    notes = report.results[1].notes
    assert any(n.startswith("witness.test/w1 holds this head now") for n in notes), notes
    assert report.summary["witnessed by"] == "witness.test/w1, witness.test/w2"
    assert (
        f"one log for run {RUN_ID!r}: witness.test/w1, witness.test/w2 cosign no other "
        "origin for it" in notes
    )
    assert report.summary["log origin"] == f"{settings.origin}/runs/{RUN_ID}"


def test_a_rollback_to_a_cosigned_head_fails_for_a_first_time_verifier(
    witnessed: Witnessed, serve_app: Callable[[WebSettings], str], tmp_path: Path
) -> None:
    settings, witnesses = witnessed.settings, witnessed.witnesses
    roll_back(settings, ROLLED_BACK_SIZE)
    keys_only = [w.split("@", 1)[0] for w in witnesses]
    expected = (
        "witness witness.test/{} now holds size 7 of this log (log-signed, cosigned {}), newer "
        "than the served head of size 5: the log was rolled back to an older head, or it grew "
        "while this verify ran (run it again)"
    )

    with DirectSource(settings) as source:
        cosignatures_only = verify(source, keys_only)
        asked = verify(source, witnesses)
    # The attack is complete: with cosignatures alone, nothing is wrong with the old head...
    assert cosignatures_only.ok, cosignatures_only.render()
    assert any("not asked what they hold now" in n for n in cosignatures_only.results[1].notes)
    # ...but both witnesses, asked themselves, hold the larger tree.
    assert not asked.ok
    failures = check_1(asked)
    assert [f.split(", cosigned")[0] for f in failures[:2]] == [
        expected.format(name, "").split(", cosigned")[0] for name in ("w1", "w2")
    ]
    assert failures[2] == (
        "witness quorum not met: expected 2 witnesses that cosigned size 5 and still hold it, "
        "got 0 (none)"
    )

    # The same through the public API: the witnesses are asked directly, not through it.
    source = ApiSource(serve_app(settings))
    try:
        through_api = verify(source, witnesses)
    finally:
        source.close()
    assert check_1(through_api) == failures

    # And on the command line, with a quorum of 2.
    result = run_as_auditor_in_process(
        [
            "verify",
            RUN_ID,
            "--api",
            serve_app(settings),
            "--json",
            "--witness",
            witnesses[0],
            "--witness",
            witnesses[1],
            "--quorum",
            "2",
        ],
        tmp_path,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert [f["message"] for f in report["checks"][0]["failures"]] == failures


def test_a_second_log_for_the_run_under_another_origin_is_named(witnessed: Witnessed) -> None:
    settings, witnesses = witnessed.settings, witnessed.witnesses
    # The witnesses accept the second origin as a new log and cosign it.
    assert push_latest(witnessed.other_log.ledger, RUN_ID, witnessed.endpoints).ok
    other = witnessed.other_log.origin
    assert other != f"{settings.origin}/runs/{RUN_ID}"

    with DirectSource(settings) as source:
        unpinned = verify(source, witnesses)
        pinned = verify(source, witnesses, vkey=witnessed.log_vkey)

    claim = (
        f"another log claims run {RUN_ID!r}: {other} (size 5, cosigned by witness.test/w1); "
        f"{other} (size 5, cosigned by witness.test/w2); this one is "
        f"{settings.origin}/runs/{RUN_ID} (a split view under another origin, or another "
        "operator's run of the same name)"
    )
    assert not unpinned.ok
    assert check_1(unpinned) == [f"{claim}: pin the run's log key with --vkey, from its publisher"]
    # With the log key learned from the run's publisher, the verifier knows which log is the
    # run: the other is named, and the run verifies.
    assert pinned.ok, pinned.render()
    assert f"{claim}; the pinned --vkey says which log is the run" in pinned.results[1].notes
