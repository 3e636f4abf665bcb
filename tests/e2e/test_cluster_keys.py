"""Every party signs for itself (issue 12): two clusters keep their keys in their own folders,
as separate hosts would; the coordinator's folder holds none of them; and a coordinator that
signs a cluster's contribution with any key it holds is caught by verify, which names the
cluster and the step."""

from __future__ import annotations

import json
from typing import Any

import pytest
from e2e.forger import Forger, Payloads

from attestation.contribution import Contribution, sign_contribution
from attestation.keys import SigningKey
from records import Genesis
from storage import open_store
from veritrain.keyring import KeyRing
from veritrain.settings import Settings
from veritrain.sources import DirectSource
from veritrain.verify import verify_run

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
