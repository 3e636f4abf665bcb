"""Multi-process training (gloo, CPU, 2 clusters x 2 stages): convergence, bitwise repeatability,
re-execution of one step, and resumption after the whole process group is killed.

One reference run is trained once for the module; every other run is compared with it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import transformers
from e2e.recorded_runs import config_file, with_light_extras, with_short_warm_up

from trainer.api import reexecute_outer_step, train
from trainer.checkpoint_layout import TRAINER_STATE, CheckpointFiles
from trainer.config import PoisonForTesting, TrainConfig, with_overrides
from trainer.generate import greedy_generate, model_from_state
from trainer.hf_repo import GENERATION_CONFIG, HF_CONFIG, load_pretrained
from trainer.memory_recorder import InMemoryRecorder, MemoryRecording, shared_sink
from trainer.presets import run_preset
from trainer.runtime.lighthouse import Lighthouse, LighthouseSettings
from veritrain.record.local_recorder import (
    LocalDirectoryRecorder,
    load_step,
    read_records,
    step_directory,
)

STEPS = 4


def reference_config() -> TrainConfig:
    """The tiny preset, 4 outer steps of H = 4, with the e2e runs' light extras: the held-out
    loss on 1 batch and each contribution's own-data score on 1 (the preset: 4 and 2). At H = 4
    those forward passes cost about as much CPU as the inner steps, in each of the module's
    three training runs and two re-executions; no test here reads the score, and the held-out
    loss still falls by more than a nat (at the short warm-up: 16 inner steps)."""
    return with_short_warm_up(
        with_light_extras(
            with_overrides(run_preset("tiny"), outer_steps=STEPS, inner_steps=4, run_id="itest")
        )
    )


def cli_args(folder: Path) -> list[str]:
    """The reference configuration as `veritrain train` options (a file in ``folder``)."""
    return ["--config", str(config_file(reference_config(), folder))]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Holds the corpus (as VERITRAIN_DATA_DIR/corpus) shared by every run of this module."""
    return tmp_path_factory.mktemp("trainer-runs")


@pytest.fixture(scope="module")
def reference(workspace: Path) -> Path:
    out = workspace / "reference"
    summary = train(
        reference_config(),
        LocalDirectoryRecorder.factory(out),
        data_dir=workspace / "corpus",
        quiet=True,
    )
    assert summary is not None and summary.steps == STEPS
    return out


def assert_same_state(actual: CheckpointFiles, expected: CheckpointFiles) -> None:
    assert actual.names() == expected.names()
    for name, tensors in expected.tensors.items():
        assert sorted(actual.tensors[name]) == sorted(tensors), name
        for key, tensor in tensors.items():
            assert torch.equal(actual.tensors[name][key], tensor), f"{name}:{key} differs"
    assert actual.json == expected.json


def test_held_out_loss_decreases_over_outer_steps(reference: Path) -> None:
    records = read_records(reference)
    assert [r["step"] for r in records] == list(range(STEPS))
    evals = [r["metrics"]["eval_loss"] for r in records]
    # From ln(256) = 5.5 nats towards the corpus's byte entropy: down by more than a nat, and
    # every later step below the first two (the outer Nesterov step may overshoot locally).
    assert evals[-1] < evals[0] - 1.0, evals
    assert max(evals[2:]) < min(evals[:2]), evals
    last = records[-1]
    assert len(last["contribution_digests"]) == 4  # 2 clusters x 2 stages
    assert {r["cluster"] for r in last["data_ranges"]} == {0, 1}
    saved = sorted(p.name for p in step_directory(reference, STEPS - 1).glob("*.safetensors"))
    tokenizer_files = ["tokenizer.json", "tokenizer_config.json"]
    assert sorted(last["files"]) == sorted(
        [*saved, TRAINER_STATE, HF_CONFIG, GENERATION_CONFIG, *tokenizer_files]
    )


def test_a_recorded_step_loads_in_transformers_with_our_logits_and_generations(
    reference: Path,
) -> None:
    """The step folder of a real 2 x 2 run (tied embedding split across the stages) is a model
    repo: transformers loads it with no extra code and agrees with our model and decoding."""
    folder = step_directory(reference, STEPS - 1)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    config, state = load_pretrained(folder)
    assert config == reference_config().model
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, config.vocab_size, (2, config.context), generator=generator)
    with torch.no_grad():
        difference = (hf(tokens).logits - model_from_state(config, state)(tokens)).abs().max()
    assert float(difference) <= 1e-5
    prompts = [list(b"def "), list(b"import os\n")]
    generations = greedy_generate(config, state, prompts, max_new_tokens=12)
    for prompt, ours in zip(prompts, generations, strict=True):
        ids = torch.tensor([prompt])
        out = hf.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=12
        )
        assert out[0, len(prompt) :].tolist() == ours


def test_reexecuting_a_step_reproduces_its_output_bitwise(reference: Path, workspace: Path) -> None:
    before = load_step(step_directory(reference, 2))
    again = reexecute_outer_step(reference_config(), before, 3, data_dir=workspace / "corpus")
    assert_same_state(again.files, load_step(step_directory(reference, 3)))
    recorded = read_records(reference)[3]
    assert [c.__dict__ for c in again.record.contribution_digests] == recorded[
        "contribution_digests"
    ]


def test_one_cluster_alone_reproduces_its_contribution_digests(
    reference: Path, workspace: Path
) -> None:
    before = load_step(step_directory(reference, 1))
    again = reexecute_outer_step(
        reference_config(), before, 2, cluster=1, data_dir=workspace / "corpus"
    )
    recorded = {
        (c["cluster"], c["stage"]): c["digest"]
        for c in read_records(reference)[2]["contribution_digests"]
    }
    assert again.contribution_digests == {(1, 0): recorded[(1, 0)], (1, 1): recorded[(1, 1)]}


@pytest.fixture
def cli_env(workspace: Path) -> Iterator[dict[str, str]]:
    env = {**os.environ, "VERITRAIN_DATA_DIR": str(workspace), "COLUMNS": "200"}
    yield env


def test_resume_after_sigkill_continues_exactly_like_the_uninterrupted_run(
    reference: Path, workspace: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    veritrain = shutil.which("veritrain", path=str(Path(sys.executable).parent))
    assert veritrain is not None
    out, log = tmp_path / "killed", tmp_path / "first.log"
    with log.open("w") as output:
        first = subprocess.Popen(
            [veritrain, "train", *cli_args(tmp_path), "--workdir", str(out)],
            env=cli_env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 300  # a guard against hanging, not a speed check
        while not (step_directory(out, 1) / "record.json").exists():
            assert first.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        os.killpg(first.pid, signal.SIGKILL)  # the launcher and every training process
        first.wait()
    assert not (step_directory(out, STEPS - 1) / "record.json").exists(), (
        "the run finished before the kill"
    )
    assert f"step 0/{STEPS - 1}" in log.read_text()

    resumed = subprocess.run(
        [veritrain, "train", "--resume", str(out)],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"step {STEPS - 1}/{STEPS - 1}" in resumed.stdout
    assert [r["step"] for r in read_records(out)] == list(range(STEPS))
    assert_same_state(
        load_step(step_directory(out, STEPS - 1)), load_step(step_directory(reference, STEPS - 1))
    )


def test_a_second_run_with_the_same_seed_under_torchrun_is_bitwise_identical(
    reference: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Two runs with the same seed are bitwise identical at every step, here the second one
    on the multi-host path, on one host: a lighthouse, and one torchrun launch per cluster
    (RANK = stage, WORLD_SIZE = stages, MASTER_ADDR/PORT = the cluster's own store); cluster 1
    takes the run's configuration from cluster 0. (One run for both properties: a second
    training run costs more CPU than the rest of this module's checks.)"""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun is not None
    out = tmp_path / "torchrun"
    lighthouse = Lighthouse(
        host="127.0.0.1", port=0, advertise="127.0.0.1", settings=LighthouseSettings(min_clusters=2)
    )
    try:
        launches = [
            subprocess.Popen(
                [
                    torchrun,
                    "--standalone",
                    "--nproc-per-node",
                    "2",
                    "-m",
                    "veritrain",
                    "train",
                    "--cluster",
                    str(j),
                    "--lighthouse",
                    lighthouse.url,
                    "--workdir",
                    str(out),
                    *(cli_args(tmp_path) if j == 0 else ["--run-id", "itest"]),
                ],
                env=cli_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for j in (0, 1)
        ]
        outputs = [launch.communicate(timeout=600)[0] for launch in launches]
    finally:
        lighthouse.close()
    assert [launch.returncode for launch in launches] == [0, 0], "\n".join(outputs)
    assert outputs[0].count("step ") == STEPS  # only the coordinator prints the steps
    for step in range(STEPS):
        assert_same_state(
            load_step(step_directory(out, step)), load_step(step_directory(reference, step))
        )
    expected = [r["contribution_digests"] for r in read_records(reference)]
    assert [r["contribution_digests"] for r in read_records(out)] == expected


def test_a_poisoned_cluster_is_flagged_in_the_step_it_is_poisoned(workspace: Path) -> None:
    config = replace(
        with_short_warm_up(
            with_overrides(run_preset("tiny"), outer_steps=3, inner_steps=4, run_id="poison")
        ),
        poison_for_testing=PoisonForTesting(cluster=1, step=2, kind="scale", factor=100.0),
    )
    with shared_sink() as sink:
        train(config, InMemoryRecorder.factory(sink), data_dir=workspace / "corpus", quiet=True)
        records = MemoryRecording(sink.items()).records

    def norm_flags(step: int) -> list[tuple[int, bool]]:
        (applied,) = records[step].applied
        return [(v.cluster, v.excluded) for v in applied.verdicts if "large_norm" in v.flags]

    assert norm_flags(0) == norm_flags(1) == []
    assert norm_flags(2) == [(1, False)]  # one verdict for both stages; two clusters: no exclusion
    assert records[2].flagged_clusters == [1]
    scores = [v.score for v in records[2].applied[0].verdicts]
    assert scores[0] is not None and scores[0].held_out < 0  # the honest update helps
    assert scores[1] is not None and scores[1].held_out > 1  # x100 blows the loss up
