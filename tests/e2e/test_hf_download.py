"""A standard client downloads checkpoint files: ``huggingface_hub.hf_hub_download``
against the served app, unmodified, into its usual cache, checked against the manifest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from unit.web.web_fixture_run import ServedRun


@pytest.fixture(autouse=True)
def online_hub_client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The client must talk to our endpoint: not offline, no token, no xet, no telemetry.
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))


def manifest(served: ServedRun, step: int) -> dict[str, str]:
    body = httpx.get(f"{served.url}/api/v1/runs/{served.run.run_id}/steps/{step}/checkpoint").json()
    return {f["name"]: f["digest"] for f in body["files"]}


def test_hf_hub_download_fetches_a_shard_that_matches_the_manifest(
    served_demo: ServedRun, tmp_path: Path
) -> None:
    run = served_demo.run
    files = manifest(served_demo, 2)
    shard = sorted(n for n in files if n.startswith("model-0"))[0]

    path = hf_hub_download(
        repo_id=run.run_id,
        filename=shard,
        revision="step-000002",
        endpoint=served_demo.url,
        cache_dir=tmp_path / "cache",
    )

    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == files[shard]
    # The cache layout is the Hub's: the revision points at the "commit", the manifest root.
    refs = next((tmp_path / "cache").glob("models--*/refs/step-000002"))
    assert refs.read_text() == run.checkpoints[2].manifest_root
    assert Path(path).parent.name == run.checkpoints[2].manifest_root


def test_the_default_revision_is_the_newest_step_and_a_sharded_model_index_loads(
    served_demo: ServedRun, tmp_path: Path
) -> None:
    run = served_demo.run
    index_path = hf_hub_download(
        repo_id=run.run_id,
        filename="model.safetensors.index.json",
        endpoint=served_demo.url,
        local_dir=tmp_path / "model",
    )
    index = json.loads(Path(index_path).read_text())
    for shard in sorted(set(index["weight_map"].values())):
        hf_hub_download(
            repo_id=run.run_id,
            filename=shard,
            endpoint=served_demo.url,
            local_dir=tmp_path / "model",
        )

    from safetensors.torch import load_file

    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors.update(load_file(tmp_path / "model" / shard))
    assert set(tensors) == set(index["weight_map"])
    latest = manifest(served_demo, run.last_step)
    for name, digest in latest.items():
        if (tmp_path / "model" / name).exists():
            assert hashlib.sha256((tmp_path / "model" / name).read_bytes()).hexdigest() == digest


def test_a_second_download_is_served_from_the_cache(served_demo: ServedRun, tmp_path: Path) -> None:
    run = served_demo.run
    first = hf_hub_download(
        repo_id=run.run_id,
        filename="trainer_state.json",
        revision="step-000001",
        endpoint=served_demo.url,
        cache_dir=tmp_path,
    )
    second = hf_hub_download(
        repo_id=run.run_id,
        filename="trainer_state.json",
        revision="step-000001",
        endpoint=served_demo.url,
        cache_dir=tmp_path,
    )

    assert first == second
    assert json.loads(Path(first).read_text())["step"] == 1


@pytest.mark.parametrize(
    ("repo_id", "filename", "revision", "error"),
    [
        ("no-such-run", "trainer_state.json", "latest", RepositoryNotFoundError),
        ("demo-1", "trainer_state.json", "step-000099", RevisionNotFoundError),
        ("demo-1", "pytorch_model.bin", "latest", EntryNotFoundError),
    ],
)
def test_missing_runs_steps_and_files_raise_the_hubs_own_errors(
    served_demo: ServedRun,
    tmp_path: Path,
    repo_id: str,
    filename: str,
    revision: str,
    error: type[Exception],
) -> None:
    with pytest.raises(error):
        hf_hub_download(
            repo_id=repo_id,
            filename=filename,
            revision=revision,
            endpoint=served_demo.url,
            cache_dir=tmp_path,
        )


def test_list_repo_refs_lists_every_step_and_main_at_the_newest(served_demo: ServedRun) -> None:
    from huggingface_hub import HfApi

    # huggingface_hub's list_repo_refs takes the endpoint from its HfApi, not as an argument.
    run = served_demo.run
    refs = HfApi(endpoint=served_demo.url).list_repo_refs(run.run_id, include_pull_requests=True)

    steps = sorted(run.checkpoints)
    assert [(t.name, t.ref, t.target_commit) for t in refs.tags] == [
        (f"step-{t:06d}", f"refs/tags/step-{t:06d}", run.checkpoints[t].manifest_root)
        for t in steps
    ]
    newest = run.checkpoints[steps[-1]].manifest_root
    assert {(b.name, b.target_commit) for b in refs.branches} == {
        ("main", newest),
        ("latest", newest),
    }
    assert refs.converts == [] and refs.pull_requests == []
    # A listed tag is a revision the client downloads by.
    path = hf_hub_download(
        repo_id=run.run_id,
        filename=min(run.checkpoints[steps[0]].files),
        revision=refs.tags[0].name,
        endpoint=served_demo.url,
    )
    assert Path(path).parent.name == refs.tags[0].target_commit


def test_list_repo_refs_of_an_unknown_run_is_repository_not_found(
    served_demo: ServedRun,
) -> None:
    from huggingface_hub import HfApi

    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=served_demo.url).list_repo_refs("no-such-run")
