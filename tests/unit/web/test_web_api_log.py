"""The run and log API: what ``veritrain verify --api`` reads. Every answer is checked the
way an independent verifier checks it (signatures, hashes, proofs), not just for shape."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from unit.web.web_fixture_run import DemoRun

from ledger.audit import audit_run_log
from ledger.merkle import leaf_hash, verify_consistency, verify_inclusion
from ledger.receipt import verify_receipt
from ledger.tlog_checkpoint import verify_checkpoint

IMMUTABLE = "public, max-age=31536000, immutable"


def all_entries(client: TestClient, run_id: str, limit: int) -> list[dict]:
    entries, start = [], 0
    while start is not None:
        page = client.get(
            f"/api/v1/runs/{run_id}/entries", params={"start": start, "limit": limit}
        ).json()
        entries.extend(page["entries"])
        start = page["next_start"]
    return entries


def test_runs_list_names_the_run_with_its_log_state(client: TestClient, demo_run: DemoRun) -> None:
    response = client.get("/api/v1/runs")

    assert response.status_code == 200
    assert response.headers["cache-control"] == "public, max-age=5"
    (run,) = response.json()["runs"]
    assert run["run_id"] == demo_run.run_id
    assert run["status"] == "finished"
    assert run["outer_steps"] == demo_run.steps
    assert run["size"] == demo_run.steps + 3  # genesis, data manifest, steps, final
    assert run["origin"] == f"{demo_run.origin}/runs/{demo_run.run_id}"


def test_run_detail_has_a_signed_tree_head_verifiable_with_the_enrolled_log_key(
    client: TestClient, demo_run: DemoRun
) -> None:
    run = client.get(f"/api/v1/runs/{demo_run.run_id}").json()

    log_keys = [k["vkey"] for k in run["keys"] if k["role"] == "log"]
    assert log_keys == [demo_run.log_vkey]
    checkpoint = verify_checkpoint(run["tree_head"]["note"], log_keys, origin=run["origin"])
    assert checkpoint.size == run["size"] == run["tree_head"]["size"]
    assert checkpoint.root_hash.hex() == run["tree_head"]["root_hash"]


@pytest.mark.parametrize("limit", [1, 2, 100])
def test_paging_through_entries_yields_the_whole_log_which_audits_against_the_signed_head(
    client: TestClient, demo_run: DemoRun, limit: int
) -> None:
    entries = all_entries(client, demo_run.run_id, limit)
    note = client.get(f"/api/v1/runs/{demo_run.run_id}/log/checkpoint").text

    assert [e["index"] for e in entries] == list(range(demo_run.steps + 3))
    for entry in entries:
        assert leaf_hash(entry["body"].encode()).hex() == entry["leaf_hash"]
    summary = audit_run_log(
        demo_run.run_id, [e["body"].encode() for e in entries], note, [demo_run.log_vkey]
    )
    assert summary.finished
    assert summary.kinds["outer_step"] == demo_run.steps


def test_a_full_page_is_cached_forever_and_the_last_page_briefly(
    client: TestClient, demo_run: DemoRun
) -> None:
    full = client.get(f"/api/v1/runs/{demo_run.run_id}/entries", params={"start": 0, "limit": 2})
    tail = client.get(f"/api/v1/runs/{demo_run.run_id}/entries", params={"start": 5, "limit": 100})

    assert full.headers["cache-control"] == IMMUTABLE
    assert full.json()["next_start"] == 2
    assert tail.headers["cache-control"] == "public, max-age=5"
    assert tail.json()["next_start"] is None
    assert [e["index"] for e in tail.json()["entries"]] == [5, 6]


def test_a_page_past_the_end_is_empty(client: TestClient, demo_run: DemoRun) -> None:
    page = client.get(f"/api/v1/runs/{demo_run.run_id}/entries", params={"start": 50}).json()

    assert page["entries"] == []
    assert page["next_start"] is None


@pytest.mark.parametrize("params", [{"start": -1}, {"limit": 0}, {"limit": 1001}, {"start": "x"}])
def test_bad_pagination_is_refused_with_422(
    client: TestClient, demo_run: DemoRun, params: dict
) -> None:
    response = client.get(f"/api/v1/runs/{demo_run.run_id}/entries", params=params)

    assert response.status_code == 422


def test_one_entry_is_immutable_and_its_body_is_the_recorded_payload(
    client: TestClient, demo_run: DemoRun
) -> None:
    response = client.get(f"/api/v1/runs/{demo_run.run_id}/entries/2")

    assert response.status_code == 200
    assert response.headers["cache-control"] == IMMUTABLE
    entry = response.json()
    assert (entry["kind"], entry["step"]) == ("outer_step", 0)
    payload = json.loads(entry["body"])["payload"]
    assert payload["checkpoint"]["manifest_root"] == demo_run.checkpoints[0].manifest_root


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/runs/nope",
        "/api/v1/runs/nope/entries",
        "/api/v1/runs/demo-1/entries/99",
        "/api/v1/runs/nope/log/checkpoint",
        "/api/v1/runs/demo-1/entries/99/receipt",
        "/api/v1/runs/nope/metrics",
    ],
)
def test_unknown_runs_and_entries_are_404_with_a_reason(client: TestClient, path: str) -> None:
    response = client.get(path)

    assert response.status_code == 404
    assert "nope" in response.json()["detail"] or "99" in response.json()["detail"]


def test_a_receipt_verifies_offline_with_the_entry_body_and_the_log_key(
    client: TestClient, demo_run: DemoRun
) -> None:
    body = client.get(f"/api/v1/runs/{demo_run.run_id}/entries/3").json()["body"].encode()
    latest = client.get(f"/api/v1/runs/{demo_run.run_id}/entries/3/receipt")
    pinned = client.get(f"/api/v1/runs/{demo_run.run_id}/entries/3/receipt", params={"size": 4})

    assert latest.headers["content-type"].startswith("text/plain")
    assert verify_receipt(latest.text, body, [demo_run.log_vkey]).size == demo_run.steps + 3
    assert verify_receipt(pinned.text, body, [demo_run.log_vkey]).size == 4
    assert pinned.headers["cache-control"] == IMMUTABLE
    assert latest.headers["cache-control"] == "public, max-age=5"


def test_a_receipt_for_an_entry_beyond_the_size_is_400(
    client: TestClient, demo_run: DemoRun
) -> None:
    response = client.get(f"/api/v1/runs/{demo_run.run_id}/entries/5/receipt", params={"size": 3})

    assert response.status_code == 400
    assert "index 5" in response.json()["detail"]


def test_signed_tree_heads_of_every_size_verify_and_old_ones_are_immutable(
    client: TestClient, demo_run: DemoRun
) -> None:
    latest = client.get(f"/api/v1/runs/{demo_run.run_id}/log/checkpoint")
    old = client.get(f"/api/v1/runs/{demo_run.run_id}/log/checkpoint", params={"size": 2})

    assert latest.headers["content-type"].startswith("text/plain")
    assert verify_checkpoint(latest.text, [demo_run.log_vkey]).size == demo_run.steps + 3
    assert verify_checkpoint(old.text, [demo_run.log_vkey]).size == 2
    assert old.headers["cache-control"] == IMMUTABLE
    assert (
        client.get(
            f"/api/v1/runs/{demo_run.run_id}/log/checkpoint", params={"size": 99}
        ).status_code
        == 404
    )


def test_inclusion_proofs_verify_against_the_signed_root_of_their_size(
    client: TestClient, demo_run: DemoRun
) -> None:
    for index, size in [(0, 1), (2, 5), (6, 7), (3, None)]:
        params = {"index": index} | ({"size": size} if size else {})
        proof = client.get(
            f"/api/v1/runs/{demo_run.run_id}/log/proof/inclusion", params=params
        ).json()
        note = client.get(proof["checkpoint_url"]).text
        signed = verify_checkpoint(note, [demo_run.log_vkey])
        body = client.get(f"/api/v1/runs/{demo_run.run_id}/entries/{index}").json()["body"].encode()

        assert signed.size == proof["size"] and signed.root_hash.hex() == proof["root_hash"]
        assert proof["leaf_hash"] == leaf_hash(body).hex()
        verify_inclusion(
            leaf_hash(body),
            index,
            proof["size"],
            [bytes.fromhex(h) for h in proof["hashes"]],
            signed.root_hash,
        )


def test_consistency_proofs_show_the_log_only_grew(client: TestClient, demo_run: DemoRun) -> None:
    for old, new in [(1, 7), (3, 5), (4, None), (7, 7)]:
        params = {"old": old} | ({"new": new} if new else {})
        proof = client.get(
            f"/api/v1/runs/{demo_run.run_id}/log/proof/consistency", params=params
        ).json()
        root1 = verify_checkpoint(
            client.get(f"/api/v1/runs/{demo_run.run_id}/log/checkpoint", params={"size": old}).text,
            [demo_run.log_vkey],
        ).root_hash
        root2 = verify_checkpoint(
            client.get(
                f"/api/v1/runs/{demo_run.run_id}/log/checkpoint", params={"size": proof["new"]}
            ).text,
            [demo_run.log_vkey],
        ).root_hash

        assert (proof["old_root"], proof["new_root"]) == (root1.hex(), root2.hex())
        verify_consistency(
            old, proof["new"], [bytes.fromhex(h) for h in proof["hashes"]], root1, root2
        )


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/log/proof/inclusion?index=7", 400),
        ("/log/proof/inclusion?index=1&size=1", 400),
        ("/log/proof/inclusion?index=-1", 422),
        ("/log/proof/consistency?old=0", 422),
        ("/log/proof/consistency?old=5&new=3", 400),
        ("/log/proof/consistency?old=3&new=70", 400),
    ],
)
def test_proofs_outside_the_log_are_refused(
    client: TestClient, demo_run: DemoRun, path: str, status: int
) -> None:
    response = client.get(f"/api/v1/runs/{demo_run.run_id}{path}")

    assert response.status_code == status
    assert response.json()["detail"]
