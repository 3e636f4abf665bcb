"""Every party signs for itself (issue 12): two clusters keep their keys in their own folders,
as separate hosts would; the coordinator's folder holds none of them; and a coordinator that
signs a cluster's contribution with any key it holds is caught by verify, which names the
cluster and the step."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e.auditor_cli import run_as_auditor_in_process
from e2e.forger import Forger, Payloads

from attestation.contribution import Contribution, sign_contribution
from attestation.keys import SigningKey
from records import Genesis
from storage import open_store
from veritrain.audit.verify import verify_run
from veritrain.record.keyring import KeyRing
from veritrain.settings import Settings
from veritrain.sources import DirectSource
from web.settings import WebSettings

STEP = 2


def _genesis(settings: Settings) -> Genesis:
    with DirectSource(settings) as source:
        return Genesis.from_payload(
            json.loads(source.entry_bodies(source.latest_run_id())[0])["payload"]
        )


def test_each_cluster_keeps_its_keys_in_its_own_folder_and_the_coordinator_none(
    recorded_run: Settings,
) -> None:
    genesis = _genesis(recorded_run)
    enrolled = {k.contribution for k in genesis.keys.clusters} | {
        k.attestation for k in genesis.keys.clusters
    }

    coordinator = sorted(p.name for p in recorded_run.keys_path.rglob("*.key"))
    held_by_coordinator = {
        SigningKey.load(p).public.vkey for p in recorded_run.keys_path.rglob("*.key")
    }
    assert coordinator == ["log.key", "statement.key"]
    assert not held_by_coordinator & enrolled
    for cluster in genesis.keys.clusters:
        folder = (
            recorded_run.data_dir
            / "cluster-keys"
            / f"cluster-{cluster.cluster}"
            / "runs"
            / genesis.run_id
        )
        own = {SigningKey.load(p).public.vkey for p in folder.glob("*.key")}
        assert {cluster.contribution, cluster.attestation, cluster.platform_root} == own


@pytest.mark.parametrize("which", ["statement", "log"])
def test_a_coordinator_signing_for_a_cluster_is_named_by_verify(
    fresh_run: Settings, which: str
) -> None:
    run_id = _genesis(fresh_run).run_id
    keys = KeyRing(fresh_run.keys_path, fresh_run.origin)
    own_key = keys.statement_key(run_id) if which == "statement" else keys.log_key(run_id)

    def sign_for_cluster_1(payloads: Payloads) -> Payloads:
        for kind, payload in payloads:
            if kind == "outer_step" and payload["step"] == STEP:
                stage = payload["contributions"][1]["stages"][0]
                forged = sign_contribution(
                    Contribution(
                        run_id=run_id,
                        step=STEP,
                        cluster=1,
                        stage=0,
                        payload_digest=stage["digest"],
                        commitments_digest=stage["commitments"],
                    ),
                    own_key,
                )
                with open_store(fresh_run.store_url) as store:
                    stage["signature_object"] = store.put_bytes(forged.to_json())
        return payloads

    Forger(fresh_run, run_id).rewrite(sign_for_cluster_1, reattest=False)

    with DirectSource(fresh_run) as source:
        report = verify_run(source, run_id)
    named: list[Any] = [
        f
        for f in report.results[6].failures
        if f.step == STEP and "cluster 1 stage 0 contribution" in f.message
    ]
    assert named, report.render()
    assert report.results[4].passed, "the coordinator may still sign its own statements"


def test_verify_lists_each_clusters_keys_and_fails_on_a_pinned_key_it_does_not_enrol(
    recorded_run: Settings, serve_app: Callable[[WebSettings], str], tmp_path: Path
) -> None:
    genesis = _genesis(recorded_run)
    run_id = genesis.run_id
    url = serve_app(recorded_run)
    # 1. Cluster 1's operator reads its own folder: its keys and their fingerprint.
    folder = recorded_run.data_dir / "cluster-keys" / "cluster-1"
    held = run_as_auditor_in_process(["cluster-keys", run_id, "--key-dir", str(folder)], tmp_path)
    assert held.returncode == 0, held.stderr
    printed = dict(line.split(maxsplit=1) for line in held.stdout.splitlines())
    assert printed["contribution"] == genesis.keys.clusters[1].contribution

    # 2. verify --json lists every cluster's enrolled keys with the same fingerprint, and says
    #    which keys an auditor pinned.
    pinned = f"1={printed['contribution']}"
    honest = run_as_auditor_in_process(
        ["verify", run_id, "--api", url, "--json", "--cluster-key", pinned], tmp_path
    )
    assert honest.returncode == 0, honest.stdout + honest.stderr
    report = json.loads(honest.stdout)
    listed = {k["cluster"]: k for k in report["cluster_keys"]}
    assert listed[1]["fingerprint"] == printed["fingerprint"]
    assert (listed[0]["pinned"], listed[1]["pinned"]) == ([], ["contribution"])
    assert listed[0]["attestation"] == genesis.keys.clusters[0].attestation
    notes = report["checks"][9]["notes"]
    assert (
        f"cluster 0 keys, fingerprint {listed[0]['fingerprint'][:32]}…: not pinned: trusted "
        "as the genesis enrols them" in notes
    )
    assert (
        f"cluster 1 keys, fingerprint {printed['fingerprint'][:32]}…: pinned (contribution)"
        in notes
    )

    # 3. An auditor who learned another key from cluster 1's operator: the genesis enrols
    #    keys that are not the cluster's own, and verify says so, naming the cluster.
    other = SigningKey.generate(f"{recorded_run.origin}/runs/{run_id}/cluster-1/contribution")
    lied = run_as_auditor_in_process(
        ["verify", run_id, "--api", url, "--cluster-key", f"1={other.public.vkey}"], tmp_path
    )
    assert lied.returncode == 1
    assert (
        f"entry 0: cluster 1: the genesis enrols contribution key "
        f"{genesis.keys.clusters[1].contribution}, not the pinned {other.public.vkey}: keys not "
        "the cluster's own were enrolled for it"
    ) in lied.stdout
    bad = run_as_auditor_in_process(
        ["verify", run_id, "--api", url, "--cluster-key", "one=x"], tmp_path
    )
    assert bad.returncode == 2 and "expected J=VKEY" in bad.stderr
