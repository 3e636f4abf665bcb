"""Checkpoint files: Hugging Face compatible shards and index, bit-exact round trips through
the local store, and downloads that refuse tampered files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from huggingface_hub import load_torch_model
from safetensors import safe_open
from unit.storage.checkpoint_round_trip import (
    CONFIG,
    ERROR_FEEDBACK_FILE,
    OPTIMIZER_FILE,
    TRAINER_STATE,
    assert_bit_identical,
    assert_checkpoint_round_trip,
    read_tensor_files,
    trained_state,
    upload_checkpoint,
    write_trained_checkpoint,
)

from storage import LocalStore
from storage.checkpoint_files import (
    INDEX_FILE,
    Manifest,
    download_checkpoint,
    tensor_nbytes,
    upload_files,
    upload_manifest,
    write_files,
    write_model_index,
)
from storage.errors import CheckpointError, IntegrityError, ObjectNotFoundError
from trainer.model import CausalLM


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "objects")


def test_a_checkpoint_round_trips_bit_exactly_through_the_local_store(
    store: LocalStore, tmp_path: Path
) -> None:
    assert_checkpoint_round_trip(store, tmp_path)


def test_the_shards_and_index_follow_the_hugging_face_format(tmp_path: Path) -> None:
    state = trained_state()
    manifest = write_trained_checkpoint(state, tmp_path, shards=3)
    weights = state.model.state_dict()

    index = json.loads((tmp_path / INDEX_FILE).read_text())
    shards = sorted(set(index["weight_map"].values()))

    assert set(index) == {"metadata", "weight_map"}
    assert index["metadata"]["total_size"] == sum(tensor_nbytes(weights).values())
    assert set(index["weight_map"]) == set(weights)  # every weight mapped, tied copies too
    count = len(shards)
    assert count >= 3
    assert shards == [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]
    for shard in shards:
        # The official safetensors reader opens every shard and finds what the index says.
        with safe_open(tmp_path / shard, framework="pt") as f:
            assert set(f.keys()) == {n for n, s in index["weight_map"].items() if s == shard}
            assert f.metadata() == {"format": "pt"}
    assert sorted(manifest.digests) == sorted(
        [*shards, INDEX_FILE, OPTIMIZER_FILE, ERROR_FEEDBACK_FILE, TRAINER_STATE]
    )


def test_huggingface_hub_loads_the_sharded_weights_strictly(tmp_path: Path) -> None:
    state = trained_state()
    write_trained_checkpoint(state, tmp_path)
    fresh = CausalLM(CONFIG)

    result = load_torch_model(fresh, tmp_path, strict=True)

    assert not result.missing_keys and not result.unexpected_keys
    assert_bit_identical(fresh.state_dict(), state.model.state_dict())


def test_bfloat16_buffers_keep_their_dtype_in_the_official_reader(tmp_path: Path) -> None:
    state = trained_state()
    write_trained_checkpoint(state, tmp_path)

    with safe_open(tmp_path / ERROR_FEEDBACK_FILE, framework="pt") as f:
        tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 - safe_open has no iterator

    assert_bit_identical(tensors, state.error_feedback)
    assert {t.dtype for t in tensors.values()} == {torch.bfloat16}


def test_checkpoint_files_are_written_once(tmp_path: Path) -> None:
    write_files(tmp_path, json_files={TRAINER_STATE: {"step": 0}})
    write_model_index(tmp_path, {"model-00001-of-00001.safetensors": {"w": 4}})

    with pytest.raises(CheckpointError, match="written once"):
        write_files(tmp_path, json_files={TRAINER_STATE: {"step": 1}})
    with pytest.raises(CheckpointError, match="written once"):
        write_model_index(tmp_path, {"model-00001-of-00001.safetensors": {"w": 8}})
    assert json.loads((tmp_path / TRAINER_STATE).read_text()) == {"step": 0}


@pytest.mark.parametrize(
    "name", ["../escape.safetensors", "a/b.safetensors", ".hidden.safetensors", "x.bin"]
)
def test_unsafe_or_foreign_file_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(CheckpointError):
        write_files(tmp_path, tensor_files={name: {"t": torch.zeros(1)}})
    assert not (tmp_path.parent / "escape.safetensors").exists()


def test_trainer_state_must_be_strict_json(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="JSON-able"):
        write_files(tmp_path / "a", json_files={TRAINER_STATE: {"loss": float("nan")}})
    with pytest.raises(CheckpointError, match="JSON-able"):
        write_files(tmp_path / "b", json_files={TRAINER_STATE: {"rng": torch.get_rng_state()}})


def test_ranks_upload_their_own_files_and_the_coordinator_stores_the_manifest(
    store: LocalStore, tmp_path: Path
) -> None:
    # Two pipeline stages, each writing and uploading its own shard and optimizer file from
    # its own directory; rank 0 gathers name -> digest and name -> sizes, writes the index
    # and trainer state, and stores the manifest last.
    weights = trained_state().model.state_dict()
    names = list(weights)
    stages = [
        {n: weights[n] for n in names[: len(names) // 2]},
        {n: weights[n] for n in names[len(names) // 2 :]},
    ]
    digests: dict[str, str] = {}
    sizes: dict[str, dict[str, int]] = {}
    for rank, part in enumerate(stages, start=1):
        shard = f"model-{rank:05d}-of-00002.safetensors"
        rank_dir = tmp_path / f"rank{rank}"
        written = write_files(
            rank_dir,
            tensor_files={
                shard: part,
                f"optimizer-outer-stage{rank}.safetensors": {"m": torch.ones(2)},
            },
        )
        upload_files(store, rank_dir, written)
        digests |= written
        sizes[shard] = tensor_nbytes(part)
    coordinator = tmp_path / "rank0"
    written = write_model_index(coordinator, sizes)
    written |= write_files(coordinator, json_files={TRAINER_STATE: {"step": 5}})
    upload_files(store, coordinator, written)
    manifest = Manifest.from_digests(digests | written)

    manifest_digest = upload_manifest(store, manifest)
    download_checkpoint(store, manifest_digest, tmp_path / "downloaded")

    fresh = CausalLM(CONFIG)
    load_torch_model(fresh, tmp_path / "downloaded", strict=True)
    assert_bit_identical(fresh.state_dict(), weights)
    assert sorted(read_tensor_files(tmp_path / "downloaded")) == [
        "optimizer-outer-stage1.safetensors",
        "optimizer-outer-stage2.safetensors",
    ]
    assert json.loads((tmp_path / "downloaded" / TRAINER_STATE).read_text()) == {"step": 5}


def test_a_manifest_is_stored_only_after_its_files(store: LocalStore, tmp_path: Path) -> None:
    written = write_files(tmp_path, json_files={TRAINER_STATE: {"step": 1}})

    with pytest.raises(ObjectNotFoundError, match=TRAINER_STATE):
        upload_manifest(store, Manifest.from_digests(written))


def test_a_directory_that_does_not_match_its_manifest_is_refused(tmp_path: Path) -> None:
    manifest = write_trained_checkpoint(trained_state(), tmp_path)
    path = tmp_path / TRAINER_STATE
    path.write_text(path.read_text().replace('"step": 1', '"step": 2'))

    with pytest.raises(IntegrityError, match=TRAINER_STATE):
        manifest.verify_directory(tmp_path)


def test_a_tampered_file_in_the_store_is_never_given_its_name(
    store: LocalStore, tmp_path: Path
) -> None:
    manifest = write_trained_checkpoint(trained_state(), tmp_path / "written")
    manifest_digest = upload_checkpoint(store, tmp_path / "written", manifest)
    victim = store.path_for(manifest.digests[ERROR_FEEDBACK_FILE])
    os.chmod(victim, 0o644)
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))

    with pytest.raises(IntegrityError):
        download_checkpoint(store, manifest_digest, tmp_path / "downloaded")

    left = sorted(p.name for p in (tmp_path / "downloaded").iterdir())
    assert ERROR_FEEDBACK_FILE not in left
    assert not [name for name in left if name.endswith(".partial")]


def test_a_download_resumes_and_refuses_strangers(store: LocalStore, tmp_path: Path) -> None:
    manifest = write_trained_checkpoint(trained_state(), tmp_path / "written")
    manifest_digest = upload_checkpoint(store, tmp_path / "written", manifest)
    target = tmp_path / "downloaded"

    assert download_checkpoint(store, manifest_digest, target) == manifest
    assert download_checkpoint(store, manifest_digest, target) == manifest  # files kept
    (target / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match=r"notes\.txt"):
        download_checkpoint(store, manifest_digest, target)


def test_a_digest_that_is_not_a_manifest_is_refused(store: LocalStore, tmp_path: Path) -> None:
    digest = store.put_bytes(b'{"weights": "elsewhere"}')

    with pytest.raises(CheckpointError, match="manifest keys"):
        download_checkpoint(store, digest, tmp_path / "downloaded")
