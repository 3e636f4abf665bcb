"""The alterations of a recorded embedded run (SQLite + local objects) that the tamper matrix
(tests/e2e/test_tamper.py) and the API tests (tests/e2e/test_verify_api.py) make: each changes
what one outer step, ``STEP``, says, the way someone with write access to the ledger or the
store would."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import rfc8785

from attestation.dsse import sign_envelope
from attestation.keys import SigningKey
from attestation.statement import IN_TOTO_PAYLOAD_TYPE
from ledger.db import create_engine, upgrade
from ledger.keyring import InMemoryLogKeys
from ledger.service import Ledger
from storage import open_store
from veritrain.settings import Settings

STEP = 2
"""The outer step every case tampers with."""


def _db(settings: Settings) -> sqlite3.Connection:
    return sqlite3.connect(settings.database_url.removeprefix("sqlite:///"))


def _payload(settings: Settings, step: int) -> dict:
    with _db(settings) as db:
        (body,) = db.execute(
            "select body from entries where kind='outer_step' and step=?", (step,)
        ).fetchone()
    return json.loads(body)["payload"]


def _object_path(settings: Settings, digest: str) -> Path:
    return Path(settings.store_url.removeprefix("file://")) / "sha256" / digest


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _checkpoint_file(settings: Settings, step: int, prefix: str) -> str:
    manifest = json.loads(
        _object_path(
            settings, _payload(settings, step)["checkpoint"]["manifest_object"]
        ).read_bytes()
    )
    return next(r["digest"] for r in manifest["resources"] if r["name"].startswith(prefix))


def flip_checkpoint_byte(settings: Settings) -> None:
    path = _object_path(settings, _checkpoint_file(settings, STEP, "model-00002"))
    _flip_byte(path, path.stat().st_size // 2)


def flip_data_shard_byte(settings: Settings) -> None:
    first_read = int(_payload(settings, STEP)["data_ranges"][0]["shards"][-1][-1])
    manifest = json.loads(_object_path(settings, _data_manifest_object(settings)).read_bytes())
    shard = next(s for s in manifest["shards"] if s["index"] == first_read)
    _flip_byte(_object_path(settings, shard["sha256"]), 100)


def _data_manifest_object(settings: Settings) -> str:
    with _db(settings) as db:
        (body,) = db.execute("select body from entries where kind='data.manifest'").fetchone()
    return json.loads(body)["payload"]["manifest_object"]


def edit_metric(settings: Settings) -> None:
    with _db(settings) as db:
        changed = db.execute(
            "update metrics set value = value - 0.5 where step=? and key='eval_loss'", (STEP,)
        ).rowcount
    assert changed == 1


def delete_entry(settings: Settings) -> None:
    with _db(settings) as db:
        db.execute("delete from entries where kind='outer_step' and step=?", (STEP,))


def swap_entries(settings: Settings) -> None:
    with _db(settings) as db:
        (a, body_a), (b, body_b) = db.execute(
            "select idx, body from entries where kind='outer_step' and step in (?, ?) order by idx",
            (STEP - 1, STEP),
        ).fetchall()
        db.execute("update entries set body=? where idx=?", (body_b, a))
        db.execute("update entries set body=? where idx=?", (body_a, b))


def _rewrite_body(settings: Settings, step: int, change: Callable[[dict], None]) -> None:
    with _db(settings) as db:
        index, body = db.execute(
            "select idx, body from entries where kind='outer_step' and step=?", (step,)
        ).fetchone()
        document = json.loads(body)
        change(document["payload"])
        db.execute("update entries set body=? where idx=?", (rfc8785.dumps(document), index))


def replace_quote(settings: Settings) -> None:
    other = _payload(settings, STEP - 1)["attestation"]["quotes"]

    def use_other_quotes(payload: dict) -> None:
        payload["attestation"]["quotes"] = other

    _rewrite_body(settings, STEP, use_other_quotes)


def roll_back_tree_head(settings: Settings) -> None:
    with _db(settings) as db:
        (step_index,) = db.execute(
            "select idx from entries where kind='outer_step' and step=?", (STEP,)
        ).fetchone()
        db.execute("delete from tree_heads where size > ?", (step_index,))
        db.execute(
            "update runs set size = ?", (step_index,)
        )  # the server now serves the older head


def rewrite_generations(settings: Settings) -> None:
    """The stored generations of step STEP now say something else."""
    path = _object_path(settings, _payload(settings, STEP)["generations"]["object"])
    said = json.loads(path.read_bytes())
    said["generations"][0]["text"] = "the model said something smarter"
    path.write_bytes(rfc8785.dumps(said))


def replace_checkpoint(settings: Settings) -> None:
    """The stored manifest of step STEP now holds the (valid) manifest of step STEP - 1."""
    target = _object_path(settings, _payload(settings, STEP)["checkpoint"]["manifest_object"])
    target.write_bytes(
        _object_path(
            settings, _payload(settings, STEP - 1)["checkpoint"]["manifest_object"]
        ).read_bytes()
    )


def resign_with_foreign_keys(settings: Settings) -> None:
    """A forger with write access but none of the run's keys: lowers step STEP's eval loss,
    signs a new provenance statement with their own key, and rebuilds and re-signs the
    whole log with their own log key."""
    foreign = SigningKey.generate("forger")
    url = settings.database_url
    engine = create_engine(url)
    original = Ledger(engine)
    run_id = original.list_runs()[0].run_id
    entries = [e for e in original.entries(run_id, 0, 1000)]
    metric_rows = original.metrics(run_id)
    engine.dispose()
    for suffix in ("", "-wal", "-shm"):
        Path(url.removeprefix("sqlite:///") + suffix).unlink(missing_ok=True)
    upgrade(url)
    forged = Ledger(create_engine(url), origin=settings.origin, log_keys=InMemoryLogKeys())
    forged.create_run(run_id, entries[0].payload)
    for entry in entries[1:]:
        payload = dict(entry.payload)
        metrics = payload.pop("metrics", None)
        if entry.step == STEP:
            metrics = dict(metrics, eval_loss=metrics["eval_loss"] - 0.5)
            statement = json.dumps({"forged": True}).encode()
            envelope = sign_envelope(statement, IN_TOTO_PAYLOAD_TYPE, [foreign]).to_json()
            with open_store(settings.store_url) as store:
                payload["attestation"] = dict(
                    payload["attestation"], statement_object=store.put_bytes(envelope)
                )
        forged.append(run_id, entry.kind, payload, step=entry.step, metrics=metrics)
    assert len(metric_rows) > 0
