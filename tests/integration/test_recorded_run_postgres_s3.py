"""The end-to-end run on the production back-ends: ledger on PostgreSQL, objects on the
real SeaweedFS S3 server. Record, verify, tamper with one object, reproduce a step."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from e2e.recorded_runs import RUN_ID, record_small_run

from storage import open_store
from veritrain.audit.reproduce import reproduce_step
from veritrain.audit.verify import verify_run
from veritrain.audit.verify.seen_heads import SeenHeads
from veritrain.settings import Settings
from veritrain.sources import DirectSource


@pytest.fixture
def production_run(tmp_path: Path, postgres_url: str, s3_store_url: str) -> Settings:
    assert os.environ["AWS_ENDPOINT_URL"]  # boto3 finds SeaweedFS the way a deployment would
    return record_small_run(
        tmp_path / "veritrain-data",
        database_url=postgres_url,
        store_url=s3_store_url,
        outer_steps=3,
    )


def test_a_run_on_postgres_and_s3_verifies_and_reproduces(
    production_run: Settings, tmp_path: Path, s3_server: Any
) -> None:
    assert production_run.database_url.startswith("postgresql")
    assert production_run.store_url.startswith("s3://")
    source = DirectSource(production_run)
    try:
        report = verify_run(source, RUN_ID, seen_heads=SeenHeads(tmp_path / "witness"))
        assert report.ok, report.render()
        comparison = reproduce_step(source, RUN_ID, 1)
        assert comparison.ok, comparison.render()
        assert comparison.mode == "bitwise"

        # One flipped byte in a stored checkpoint file is caught and blamed on its step.
        payload = next(
            p
            for p in (json.loads(b)["payload"] for b in source.entry_bodies(RUN_ID))
            if p.get("step") == 1
        )
        with open_store(production_run.store_url) as store:
            manifest = store.read_bytes(payload["checkpoint"]["manifest_object"], 1 << 20)
        model = next(
            r for r in json.loads(manifest)["resources"] if r["name"].startswith("model-00001")
        )
        bucket, _, prefix = production_run.store_url.removeprefix("s3://").partition("/")
        client = s3_server.client()
        key = f"{prefix}/sha256/{model['digest']}"
        data = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
        data[len(data) // 2] ^= 0xFF
        client.put_object(Bucket=bucket, Key=key, Body=bytes(data))
        tampered = verify_run(source, RUN_ID, seen_heads=SeenHeads(tmp_path / "witness"))
        assert not tampered.ok
        assert any(f.step == 1 for f in tampered.results[7].failures), tampered.render()
    finally:
        source.close()
