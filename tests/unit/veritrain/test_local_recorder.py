"""The built-in recorders: what lands in the folder / the sink, and that it loads back."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import pickle
from pathlib import Path

import torch
from safetensors.torch import load_file

from records import DataManifest
from records.outer_step import Quorum
from trainer.checkpoint_layout import (
    MODEL_INDEX,
    TRAINER_STATE,
    CheckpointFiles,
    load_checkpoint_directory,
)
from trainer.data.shards import DirectoryShardSource
from trainer.memory_recorder import InMemoryRecorder, MemoryRecording, shared_sink
from trainer.model import model_summary
from trainer.presets import run_preset
from trainer.recorder import (
    AttestationRequest,
    ContributionDigest,
    OuterStepReport,
    ProcessInfo,
    Publication,
    RunStart,
    RunSummary,
)
from trainer.runtime.topology import Topology
from veritrain.record.local_recorder import (
    LocalDirectoryRecorder,
    latest_recorded_step,
    read_records,
    resume_directory,
    step_directory,
)

PROCESS = ProcessInfo(rank=0, world_size=2, cluster=0, stage=0, clusters=1, stages=2)


def files_of_stage(stage: int) -> dict[str, dict[str, torch.Tensor]]:
    return {
        f"model-{stage + 1:05d}-of-00002.safetensors": {
            f"model.layers.{stage}.mlp.up_proj.weight": torch.full((2, 3), float(stage))
        },
        f"inner-cluster00000-stage{stage:05d}.safetensors": {
            "rng.torch": torch.arange(4, dtype=torch.uint8)
        },
    }


def record(step: int, files: dict[str, str]) -> OuterStepReport:
    return OuterStepReport(
        step=step,
        inner_steps=3,
        method="diloco",
        metrics={"train_loss": 1.5},
        data_ranges=[],
        contribution_digests=[],
        applied=[],
        anomalies=[],
        files=files,
        quorum=Quorum(id=1, clusters=(0,), joined=(), left=()),
    )


def test_local_recorder_writes_loadable_files_with_their_digests(tmp_path: Path) -> None:
    recorder = LocalDirectoryRecorder.factory(tmp_path)(PROCESS)
    digests = {}
    for stage in (0, 1):
        json_files = {TRAINER_STATE: {"format": "x", "step": 4}} if stage == 0 else {}
        digests.update(recorder.save_state(4, files_of_stage(stage), json_files))
    directory = step_directory(tmp_path, 4)
    for name, digest in digests.items():
        assert hashlib.sha256((directory / name).read_bytes()).hexdigest() == digest
    loaded = load_file(directory / "model-00002-of-00002.safetensors")
    assert torch.equal(loaded["model.layers.1.mlp.up_proj.weight"], torch.ones(2, 3))

    assert latest_recorded_step(tmp_path) is None  # files alone do not make a recorded step
    recorder.record_outer_step(record(4, digests))
    assert latest_recorded_step(tmp_path) == 4
    assert resume_directory(tmp_path) == directory
    index = json.loads((directory / MODEL_INDEX).read_text())
    assert index["weight_map"] == {
        "model.layers.0.mlp.up_proj.weight": "model-00001-of-00002.safetensors",
        "model.layers.1.mlp.up_proj.weight": "model-00002-of-00002.safetensors",
    }
    assert index["metadata"]["total_size"] == 2 * 6 * 4
    assert read_records(tmp_path)[0]["files"] == digests

    state = load_checkpoint_directory(directory)
    assert sorted(state.tensors) == sorted(n for n in digests if n.endswith(".safetensors"))
    assert state.json[TRAINER_STATE] == {"format": "x", "step": 4}


MANIFEST = DataManifest.from_payload(
    json.loads((Path(__file__).resolve().parents[1] / "records" / "examples.json").read_text())[
        "data.manifest"
    ]["manifest"]
)


def test_local_recorder_keeps_the_run_description_and_summary(tmp_path: Path) -> None:
    recorder = LocalDirectoryRecorder(tmp_path, PROCESS)
    recorder.begin(
        RunStart(
            run_id="r",
            config={"seed": 1},
            config_digest="ab",
            topology=Topology.full(clusters=1, stages=1).recorded(
                present=(0,), backend="gloo", device="cpu"
            ),
            model=model_summary(run_preset("tiny").model, 1),
            data_manifest=MANIFEST,
            shard_source=DirectoryShardSource(tmp_path / "shards"),
            seed=1,
            resumed_from_step=None,
        )
    )
    recorder.end(RunSummary(run_id="r", steps=2, tokens=10, final_metrics={}, wall_seconds=1.0))
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["shard_directory"] == str(tmp_path / "shards")
    assert (
        DataManifest.from_payload(json.loads((tmp_path / "data-manifest.json").read_text()))
        == MANIFEST
    )
    assert json.loads((tmp_path / "summary.json").read_text())["steps"] == 2


def test_a_resumed_step_recorded_again_replaces_the_first_record(tmp_path: Path) -> None:
    recorder = LocalDirectoryRecorder(tmp_path, PROCESS)
    recorder.record_outer_step(record(0, {"a": "1"}))
    recorder.record_outer_step(record(0, {"a": "2"}))
    assert [r["files"] for r in read_records(tmp_path)] == [{"a": "2"}]


def test_memory_recorder_returns_what_each_process_saved() -> None:
    sink: list[object] = []
    for stage in (0, 1):
        process = ProcessInfo(
            rank=stage, world_size=2, cluster=0, stage=stage, clusters=1, stages=2
        )
        recorder = InMemoryRecorder.factory(sink)(process)
        digests = recorder.save_state(2, files_of_stage(stage), {})
        assert set(digests) == set(files_of_stage(stage))
    InMemoryRecorder(sink, PROCESS).record_outer_step(record(2, {}))
    recording = MemoryRecording(sink)
    state = recording.state(2)
    assert torch.equal(
        state.tensors["model-00001-of-00002.safetensors"]["model.layers.0.mlp.up_proj.weight"],
        torch.zeros(2, 3),
    )
    assert [r.step for r in recording.records] == [2]


def _save_stage_state(sink: object, stage: int, step: int) -> None:
    process = ProcessInfo(rank=stage, world_size=2, cluster=0, stage=stage, clusters=1, stages=2)
    InMemoryRecorder.factory(sink)(process).save_state(step, files_of_stage(stage), {})  # type: ignore[arg-type]


def test_a_folder_sink_gathers_what_other_processes_saved_in_the_order_they_saved_it() -> None:
    """Training processes append to one sink; what they saved reads back in append order, so a
    resumed launch's later save of the same step replaces the first one (last wins)."""
    # fork: a forkserver started here would serve the later training launches of this pytest
    # worker without their preloaded modules.
    context = multiprocessing.get_context("fork")
    with shared_sink() as sink:
        for stage in (0, 1):
            child = context.Process(target=_save_stage_state, args=(sink, stage, 2))
            child.start()
            child.join()
            assert child.exitcode == 0
        InMemoryRecorder(sink, PROCESS).record_outer_step(record(2, {"a": "first"}))
        InMemoryRecorder(sink, PROCESS).record_outer_step(record(2, {"a": "resumed"}))
        items = sink.items()
        assert not list(sink.folder.glob(".*"))  # every append is renamed into place whole
        recording = MemoryRecording(items)
        assert set(recording.state(2).tensors) == set(files_of_stage(0)) | set(files_of_stage(1))
        assert [r.files for r in recording.records] == [{"a": "resumed"}]
        assert [item[0] for item in items] == ["state", "state", "record", "record"]
        assert pickle.loads(pickle.dumps(sink)).folder == sink.folder
    assert not sink.folder.exists()  # removed with everything in it


def test_checkpoint_files_pack_and_unpack_exactly() -> None:
    files = CheckpointFiles(
        {"a.safetensors": {"x": torch.randn(3, dtype=torch.float64), "n": torch.tensor(7)}},
        {TRAINER_STATE: {"loss": 0.1 + 0.2}},
    )
    again = CheckpointFiles.unpack(files.pack())
    assert torch.equal(again.tensors["a.safetensors"]["x"], files.tensors["a.safetensors"]["x"])
    assert again.json[TRAINER_STATE]["loss"] == 0.1 + 0.2  # floats survive JSON bit for bit


def test_memory_recorder_keeps_each_published_payload_and_signs_nothing() -> None:
    """A re-execution's reproduce compares the payloads it kept with the recorded ones: each
    ``Publication`` lands under its (cluster, stage) and step, and nothing is signed or quoted."""
    sink: list[object] = []
    request = AttestationRequest(
        step=1, nonce="00" * 32, prev_leaf="11" * 32, statement_digest="22" * 32, statements=()
    )
    for stage in (0, 1):
        process = ProcessInfo(
            rank=stage, world_size=2, cluster=0, stage=stage, clusters=1, stages=2
        )
        recorder = InMemoryRecorder.factory(sink)(process)
        payload = f"stage {stage}".encode()
        own = ContributionDigest(cluster=0, stage=stage, digest=hashlib.sha256(payload).hexdigest())
        assert recorder.publish_contribution(Publication(step=1, own=own, payload=payload)) is None
        assert recorder.attest(request) is None
    assert MemoryRecording(sink).payloads(1) == {(0, 0): b"stage 0", (0, 1): b"stage 1"}
