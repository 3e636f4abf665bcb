"""Training on an accelerator: the outer step, the verdicts and the contribution scores never mix
a tensor on the training device with one on the host (issue 22: on a GPU the first outer step
failed in the contribution-score probe, then in the outer Nesterov step).

CI has no GPU: ``meta`` stands for it (fake_accelerator.py), and PyTorch refuses to mix meta
and CPU tensors exactly as it refuses to mix CUDA and CPU ones."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from unit.trainer.fake_accelerator import ACCELERATOR, FakeAccelerator

from trainer.api import train
from trainer.errors import ConfigError
from trainer.model import CausalLM
from trainer.outer import Gathered, OuterConfig, RoundSignals, build_outer_algorithm
from trainer.outer.contribution_score import FullModelProbe, score_contributions
from trainer.presets import MODEL_PRESETS, RUN_PRESETS
from trainer.runtime.commitments import StageCommitments
from trainer.runtime.determinism import check_devices
from trainer.runtime.pipeline_judge import PipelineJudge, PipelineProbe

MODEL = MODEL_PRESETS["tiny"]
CONFIGS = {
    "diloco": OuterConfig(kind="diloco"),
    "dilocox": OuterConfig(kind="dilocox", overlap=False, rank=4, min_rank=2, max_rank=8, bits=4),
}


def _parameters_on_the_accelerator() -> list[tuple[str, torch.Tensor]]:
    model = CausalLM(MODEL).to(ACCELERATOR)
    return [(name, p.detach()) for name, p in model.named_parameters()]


def _two_clusters(config: OuterConfig, named: list[tuple[str, torch.Tensor]]) -> list[Any]:
    return [
        build_outer_algorithm(config, named_params=named, cluster=c, n_clusters=2, seed=7)
        for c in range(2)
    ]


def test_an_outer_step_with_parameters_on_the_accelerator_keeps_them_there() -> None:
    for kind, config in CONFIGS.items():
        named = _parameters_on_the_accelerator()
        with FakeAccelerator():
            loops = _two_clusters(config, named)
            locals_ = [[p.clone() for _, p in named] for _ in loops]
            sent = [loop.contribution(0, local) for loop, local in zip(loops, locals_, strict=True)]
            payloads = [c.payload.cpu() for c in sent]  # as the exchange delivers them
            signals = RoundSignals(mean_train_loss=1.0)
            for loop, local in zip(loops, locals_, strict=True):
                update = loop.apply(0, Gathered(payloads), local, signals)
                assert update.round == 0, kind
        for local in locals_:  # the next round starts where it trains: on the accelerator
            assert {t.device for t in local} == {ACCELERATOR}, kind
        for loop in loops:  # the outer state stays on the host
            assert {t.device for t in loop.global_parameters()} == {torch.device("cpu")}, kind


def test_contribution_scores_load_each_candidate_onto_the_accelerator() -> None:
    named = _parameters_on_the_accelerator()
    params = [p for _, p in named]
    with FakeAccelerator():
        loop = _two_clusters(CONFIGS["dilocox"], named)[0]
        loop.note_round_data(0, first_inner_step=0, inner_steps=1)
        sent = loop.contribution(0, [p.clone() for p in params])
        payload = sent.payload.cpu()  # as the exchange delivers it (exchange.py)
        examination = loop.examine(0, [payload, payload])
        judge = PipelineJudge(
            CONFIGS["dilocox"],
            params=params,
            sync_tied=lambda: None,
            runner=None,  # type: ignore[arg-type]  # load() evaluates nothing
            reader=None,  # type: ignore[arg-type]
            group=None,  # type: ignore[arg-type]
            last_stage_rank=0,
            device=ACCELERATOR,
        )
        probe = PipelineProbe(judge, examination)
        for candidate in (None, 0, 1):  # θ, then θ − Δ_i of each cluster
            probe.load(candidate)
    assert {p.device for p in params} == {ACCELERATOR}


def test_the_whole_model_probe_scores_on_the_accelerator() -> None:
    named = _parameters_on_the_accelerator()
    base = {name: torch.zeros(p.shape) for name, p in named}  # θ and Δ_i come from the host
    delta = {name: torch.ones(p.shape) for name, p in named}
    batch = (torch.zeros(2, 8, dtype=torch.long), torch.zeros(2, 8, dtype=torch.long))
    with FakeAccelerator():
        probe = FullModelProbe(
            MODEL, micro_batches=1, base=base, deltas=[delta], device=ACCELERATOR
        )
        scores = score_contributions(probe, finite=[True], held_out=[batch], own=[[batch]])
    assert len(scores) == 1 and scores[0] is not None
    assert {p.device for p in probe.model.parameters()} == {ACCELERATOR}


def _no_recorder(info: Any) -> Any:
    raise AssertionError("no process should start, so no recorder should be asked for")


def test_a_cluster_needs_a_gpu_per_process_and_clusters_may_share_them() -> None:
    check_devices("cuda", 1, visible=1)  # C clusters x S1 on one GPU: separate worlds share it
    check_devices("cuda", 4, visible=8)
    with pytest.raises(ConfigError) as raised:
        check_devices("cuda", 2, visible=1)  # S2 on one GPU: NCCL's "Duplicate GPU detected"
    assert str(raised.value) == (
        "each cluster runs stages x data_parallel = 2 processes, one per GPU, but 1 CUDA "
        "device(s) are visible: use stages x data_parallel <= 1 (e.g. --stages 1), or --device cpu"
    )
    check_devices("cpu", 16, visible=0)


def test_training_on_too_few_gpus_fails_before_anything_starts(tmp_path: Path) -> None:
    stages = torch.cuda.device_count() + 1  # one more than this host has, on any host
    config = replace(RUN_PRESETS["tiny"], device="cuda", stages=stages, clusters=1)
    with pytest.raises(ConfigError, match=r"--device cpu"):
        train(config, _no_recorder, data_dir=tmp_path / "data", quiet=True)
    assert not (tmp_path / "data").exists()  # refused before preparing data or spawning


class _CountingAccelerator(FakeAccelerator):
    """Counts the copies off the device (``.to("cpu")`` of a meta tensor)."""

    def __init__(self) -> None:
        super().__init__()
        self.copies_to_host = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten._to_copy.default and args[0].device.type == "meta":
            self.copies_to_host += 1
        return super().__torch_dispatch__(func, types, args, kwargs)


def test_an_inner_step_commitment_copies_the_parameters_off_the_device_once() -> None:
    named = _parameters_on_the_accelerator()
    commitments = StageCommitments(named, run_id="run", cluster=0, stage=0)
    with _CountingAccelerator() as device:
        commitments.begin(0)
        before = device.copies_to_host
        commitments.after_inner_step(0)
        per_inner_step = device.copies_to_host - before
    assert per_inner_step == len(named)  # digest and fingerprint share one copy
