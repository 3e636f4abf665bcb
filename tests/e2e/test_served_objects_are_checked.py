"""The server never serves bytes the ledger does not back: a local object overwritten on
disk is refused -- a whole download is cut short (so ``hf_hub_download`` fails instead of
caching the bytes under the ledger's digest), a range download answers 502 -- and the
server logs which object."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import httpx
import pytest
from huggingface_hub import hf_hub_download
from unit.web.web_fixture_run import DemoRun, record_demo_run

from web.server import serve_in_thread
from web.settings import AppSettings


@pytest.fixture
def corrupted(tmp_path: Path) -> tuple[DemoRun, str, str]:
    """A run whose step-1 first model shard was overwritten on disk (same size)."""
    run = record_demo_run(
        f"sqlite:///{tmp_path / 'ledger.db'}", f"file://{tmp_path / 'objects'}", steps=2
    )
    name = sorted(n for n in run.checkpoints[1].files if n.startswith("model-0"))[0]
    digest = run.checkpoints[1].files[name]
    path = tmp_path / "objects" / "sha256" / digest
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return run, name, digest


def test_an_overwritten_object_is_never_served_whole_or_in_part(
    corrupted: tuple[DemoRun, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    run, name, digest = corrupted
    settings = AppSettings(
        database_url=run.database_url, store_url=run.store_url, origin=run.origin
    )
    with caplog.at_level(logging.ERROR, logger="veritrain.web"), serve_in_thread(settings) as url:
        with pytest.raises(Exception) as raised:
            hf_hub_download(
                repo_id=run.run_id,
                filename=name,
                revision="step-000001",
                endpoint=url,
                cache_dir=tmp_path / "cache",
            )
        ranged = httpx.get(f"{url}/api/v1/objects/{digest}", headers={"Range": "bytes=0-99"})

    assert raised.type.__name__ == "RemoteProtocolError", (
        raised.value
    )  # cut short of Content-Length
    assert not list((tmp_path / "cache").rglob(name)), (
        "the corrupt file must not land in the client's cache"
    )
    assert ranged.status_code == 502
    assert any(digest in record.getMessage() for record in caplog.records), caplog.text
