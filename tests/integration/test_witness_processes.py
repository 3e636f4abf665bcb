"""Two `veritrain witness serve` processes on loopback cosign a real recorded run; one is
restarted mid-run and keeps its state; a rolled-back log and a rewritten one (new log key,
same run id) are refused as C2SP tlog-witness says."""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from e2e.recorded_runs import OUTER_STEPS, RUN_ID, copy_run, shared_recorded_run
from unit.ledger.witness_helpers import add_checkpoint_body

from ledger.cosignature import cosignatures_in, cosigner_key
from ledger.db import create_engine, upgrade
from ledger.keyring import InMemoryLogKeys
from ledger.service import Ledger
from veritrain.audit.verify.witness_quorum import check_quorum
from veritrain.bench.server import free_port
from veritrain.settings import Settings
from veritrain.witnesses.endpoints import WitnessEndpoint
from veritrain.witnesses.push import push_tree_head


def veritrain(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "veritrain", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env or dict(os.environ),
        cwd=cwd,
    )


@dataclass
class WitnessProcess:
    """One `veritrain witness serve` process and what it needs to be restarted."""

    name: str
    key_file: Path
    db_url: str
    port: int
    vkey: str
    args: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> WitnessEndpoint:
        return WitnessEndpoint(vkey=self.vkey, url=self.url)

    def start(self) -> None:
        command = [
            sys.executable,
            "-m",
            "veritrain",
            "witness",
            "serve",
            "--key",
            str(self.key_file),
            "--db",
            self.db_url,
            "--port",
            str(self.port),
            *self.args,
        ]
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            assert self.process.poll() is None, self.log_path.read_text()
            try:
                health = httpx.get(f"{self.url}/healthz", timeout=2)
                assert health.json() == {"status": "ok", "witness": self.vkey}
                return
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the witness never answered"
                time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """A copy of the session's shared recorded run (the witnesses' cosignatures are stored in
    its ledger): no run of its own to train."""
    shared = shared_recorded_run(tmp_path_factory)
    return copy_run(shared, tmp_path_factory.mktemp("witnessed") / "data")


@pytest.fixture
def ledger(recorded: Settings) -> Iterator[Ledger]:
    engine = create_engine(recorded.database_url)
    yield Ledger(engine)
    engine.dispose()


@pytest.fixture
def witnesses(tmp_path: Path, ledger: Ledger) -> Iterator[list[WitnessProcess]]:
    [log_key] = ledger.keys(RUN_ID, role="log")
    running: list[WitnessProcess] = []
    try:
        for name in ("w1", "w2"):
            key_file = tmp_path / f"{name}.key"
            made = veritrain("witness", "keygen", f"witness.test/{name}", "--out", str(key_file))
            assert made.returncode == 0, made.stderr
            vkey = made.stdout.strip()
            assert made.stdout == vkey + "\n"  # only the vkey on stdout
            assert cosigner_key(vkey).name == f"witness.test/{name}"
            assert key_file.stat().st_mode & 0o777 == 0o600
            if name == "w1":
                args = ["--log", log_key.vkey]
            else:  # w2 reads its logs from a file it re-reads
                logs_file = tmp_path / "w2-logs.txt"
                logs_file.write_text(f"# runs witnessed by w2\n{log_key.vkey}\n")
                args = ["--logs-file", str(logs_file)]
            witness = WitnessProcess(
                name=name,
                key_file=key_file,
                db_url=f"sqlite:///{tmp_path / f'{name}.db'}",
                port=free_port(),
                vkey=vkey,
                args=args,
                log_path=tmp_path / f"{name}.log",
            )
            witness.start()
            running.append(witness)
        yield running
    finally:
        for witness in running:
            witness.stop()


def test_two_witness_processes_cosign_a_recorded_run_across_a_restart(
    recorded: Settings, ledger: Ledger, witnesses: list[WitnessProcess], tmp_path: Path
) -> None:
    size = ledger.get_run(RUN_ID).size
    assert size == 3 + OUTER_STEPS  # genesis, data manifest, the outer steps, run.final
    endpoints = [w.endpoint for w in witnesses]
    # 1. Mid-run: both cosign the head of size 3.
    mid = push_tree_head(ledger, RUN_ID, endpoints, size=3)
    assert [o.status for o in mid.outcomes] == ["cosigned", "cosigned"], mid.outcomes

    # 2. w1 restarts; its database is all it keeps.
    witnesses[0].stop()
    witnesses[0].start()

    # 3. `veritrain witness push` submits the newest head; both continue from size 3.
    env = dict(
        os.environ,
        VERITRAIN_DATABASE_URL=recorded.database_url,
        VERITRAIN_WITNESSES=" ".join(f"{w.vkey}@{w.url}" for w in witnesses),
    )
    pushed = veritrain("witness", "push", env=env, cwd=tmp_path)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert pushed.stdout.splitlines() == [
        f"witness.test/w1  cosigned     cosigned size {size} (from 3)",
        f"witness.test/w2  cosigned     cosigned size {size} (from 3)",
    ]
    assert f"run {RUN_ID}: size {size} cosigned by 2 of 2 witnesses" in pushed.stderr

    # 4. The served checkpoint carries both cosignatures, and a verifier's quorum of 2 holds.
    head = ledger.latest_tree_head(RUN_ID)
    note = ledger.cosigned_tree_head(RUN_ID).note
    keys = [cosigner_key(w.vkey) for w in witnesses]
    assert sorted(v.key.name for v in cosignatures_in(note, keys)) == [
        "witness.test/w1",
        "witness.test/w2",
    ]
    [log_key] = ledger.keys(RUN_ID, role="log")
    quorum = check_quorum(
        note,
        log_key.vkey,
        [w.vkey for w in witnesses],
        2,
        head.size,
        head.root_hash,
        lambda old, new: list(ledger.consistency_proof(RUN_ID, old, new).hashes),
    )
    assert quorum.ok, quorum.detail


def test_a_rolled_back_log_is_refused(ledger: Ledger, witnesses: list[WitnessProcess]) -> None:
    size = ledger.get_run(RUN_ID).size
    endpoints = [w.endpoint for w in witnesses]
    assert push_tree_head(ledger, RUN_ID, endpoints).ok
    w1 = witnesses[0]
    old_note = ledger.tree_head_at(RUN_ID, 3).note

    # Presented as a continuation: old size > checkpoint size is a bad request (400).
    behind = httpx.post(f"{w1.url}/add-checkpoint", content=add_checkpoint_body(size, [], old_note))
    assert behind.status_code == 400
    # Presented as if the witness were at 3: it says where it is (409, text/x.tlog.size).
    stale = httpx.post(f"{w1.url}/add-checkpoint", content=add_checkpoint_body(3, [], old_note))
    assert (stale.status_code, stale.headers["content-type"], stale.text) == (
        409,
        "text/x.tlog.size",
        f"{size}\n",
    )
    # And the log side reports the rollback instead of retrying it.
    pushed = push_tree_head(ledger, RUN_ID, endpoints, size=3)
    assert [o.status for o in pushed.outcomes] == ["refused", "refused"]


def test_a_rewritten_log_with_a_new_key_and_the_same_run_id_is_refused(
    recorded: Settings, ledger: Ledger, witnesses: list[WitnessProcess], tmp_path: Path
) -> None:
    endpoints = [w.endpoint for w in witnesses]
    assert push_tree_head(ledger, RUN_ID, endpoints).ok
    size = ledger.get_run(RUN_ID).size
    # The operator records the run again from scratch: same run id, a fresh log key, and a
    # longer history the witnesses never saw.
    url = f"sqlite:///{tmp_path / 'rewritten.db'}"
    upgrade(url)
    keys = InMemoryLogKeys()
    rewritten = Ledger(create_engine(url), origin=recorded.origin, log_keys=keys)
    rewritten.create_run(RUN_ID, {"rewritten": True})
    for step in range(size + 1):
        rewritten.append(RUN_ID, "note", {"step": step})
    new_vkey = keys(recorded.run_origin(RUN_ID)).public.vkey

    # 1. The witnesses trust only the original key: no trusted signature, 403.
    refused = push_tree_head(rewritten, RUN_ID, endpoints)
    assert [(o.status, o.http_status) for o in refused.outcomes] == [
        ("refused", 403),
        ("refused", 403),
    ]
    # 2. Even if w2's operator is talked into trusting the new key too (picked up from its
    # logs file without a restart), w2 holds the original head: the rewrite does not extend
    # it (409 names its size, then the proof from there fails: 422).
    logs_file = tmp_path / "w2-logs.txt"
    staged = tmp_path / "w2-logs.new"
    staged.write_text(logs_file.read_text() + f"{new_vkey}\n")
    staged.replace(logs_file)
    [outcome] = push_tree_head(rewritten, RUN_ID, endpoints[1:]).outcomes
    assert (outcome.status, outcome.http_status) == ("refused", 422), outcome
    assert f"not consistent with the cosigned size {size}" in outcome.detail
    # 3. What the witness holds is still the original head.
    hashed = hashlib.sha256(recorded.run_origin(RUN_ID).encode()).hexdigest()
    held = httpx.get(f"{witnesses[1].url}/{hashed}/checkpoint").text
    assert held.split("\n")[1:3] == [
        str(size),
        base64.b64encode(ledger.latest_tree_head(RUN_ID).root_hash).decode(),
    ]


def test_verify_demands_a_quorum_that_the_honest_run_meets_and_a_rewrite_does_not(
    recorded: Settings, ledger: Ledger, witnesses: list[WitnessProcess], tmp_path: Path
) -> None:
    from e2e.forger import Forger

    from veritrain.audit.verify import verify_run
    from veritrain.sources import DirectSource

    assert push_tree_head(ledger, RUN_ID, [w.endpoint for w in witnesses]).ok
    vkeys = [w.vkey for w in witnesses]
    with DirectSource(recorded) as source:
        honest = verify_run(source, RUN_ID, witnesses=vkeys, quorum=2)
        unasked = verify_run(source, RUN_ID)
    assert honest.ok, honest.render()
    assert honest.summary["witnessed by"] == "witness.test/w1, witness.test/w2"
    assert any(
        "cosigned by witness.test/w1, witness.test/w2" in n for n in unasked.results[1].notes
    )

    # The operator rewrites the whole log with a new log key: every signature is its own and
    # self-consistent, but no witness will cosign it.
    copy = recorded.model_copy(update={"database_url": f"sqlite:///{tmp_path / 'copy.db'}"})
    Path(copy.database_url.removeprefix("sqlite:///")).write_bytes(
        Path(recorded.database_url.removeprefix("sqlite:///")).read_bytes()
    )
    Forger(copy, RUN_ID).rewrite(lambda payloads: payloads, key_dir=tmp_path / "new-keys")
    engine = create_engine(copy.database_url)
    try:
        pushed = push_tree_head(Ledger(engine), RUN_ID, [w.endpoint for w in witnesses])
    finally:
        engine.dispose()
    assert [o.status for o in pushed.outcomes] == ["refused", "refused"]
    with DirectSource(copy) as source:
        rewritten = verify_run(source, RUN_ID, witnesses=vkeys, quorum=2)
        first_look = verify_run(source, RUN_ID)
    assert first_look.ok, "without witnesses a first-time verifier cannot tell"
    assert not rewritten.ok
    assert any("witness quorum not met" in f.message for f in rewritten.results[1].failures), (
        rewritten.render()
    )
