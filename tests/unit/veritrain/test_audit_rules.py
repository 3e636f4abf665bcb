"""The rules ``veritrain reproduce`` judges by (veritrain/audit): which one applies and why,
how commitments are judged and a dispute narrowed to one inner step, and the published bounds
a genesis is held to."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from records import Genesis
from records.commitments import InnerCommitments, InnerStepCommitment, ParameterCommitment
from trainer.config import TrainConfig
from trainer.execution import Execution
from veritrain.audit.distance import global_distance, relative_distance
from veritrain.audit.inner_steps import first_dispute, judge_stage
from veritrain.audit.modes import choose_mode
from veritrain.hardware import reexecution_hardware
from veritrain.policy import (
    CROSS_PRECISION_DISTANCE_BOUND,
    PARAMETER_DISTANCE_BOUND,
    policy_problems,
)

EXAMPLES = json.loads(
    (Path(__file__).resolve().parents[1] / "records" / "examples.json").read_text()
)


def _genesis_here(**policy_changes: object) -> tuple[Genesis, TrainConfig]:
    """The example genesis, its hardware class made this machine's (as if trained here)."""
    genesis = Genesis.from_payload(EXAMPLES["run.genesis"])
    config = TrainConfig.from_dict(genesis.hyperparameters)
    policy = replace(
        genesis.verification_policy, hardware=reexecution_hardware(config), **policy_changes
    )
    return replace(genesis, verification_policy=policy), config


def test_bitwise_on_the_recorded_hardware_class_with_the_recorded_settings() -> None:
    genesis, config = _genesis_here()
    choice = choose_mode(genesis, config)
    assert choice.mode == "bitwise"
    assert "this machine is in its hardware class" in choice.reason


def test_another_cpu_instruction_set_falls_back_to_the_tolerance_and_says_so() -> None:
    genesis, config = _genesis_here()
    here = reexecution_hardware(config).cpu_capability
    there = "AVX2" if here == "AVX512" else "AVX512"  # whichever this machine is not
    other = replace(genesis.verification_policy.hardware, cpu_capability=there)
    genesis = replace(
        genesis, verification_policy=replace(genesis.verification_policy, hardware=other)
    )
    choice = choose_mode(genesis, config)
    assert (choice.mode, choice.granularity, choice.bound) == (
        "tolerance",
        "tensor",
        PARAMETER_DISTANCE_BOUND,
    )
    assert f"cpu_capability '{there}' there, '{here}' here" in choice.reason


def test_re_executing_with_other_threads_is_a_tolerance_comparison() -> None:
    genesis, config = _genesis_here()
    choice = choose_mode(genesis, config, Execution(threads=2))
    assert choice.mode == "tolerance"
    assert "re-executed with threads 1 -> 2" in choice.reason


def test_across_precisions_a_stage_at_a_time_and_the_metric_is_not_judged() -> None:
    genesis, config = _genesis_here()
    choice = choose_mode(genesis, config, Execution(precision="bf16"))
    assert (choice.mode, choice.granularity, choice.bound, choice.judge_metric) == (
        "tolerance",
        "stage",
        CROSS_PRECISION_DISTANCE_BOUND,
        False,
    )
    assert choose_mode(genesis, config, Execution(precision="bf16"), "bitwise").mode == "bitwise"
    assert (
        choose_mode(genesis, config, Execution(precision="fp64")).granularity == "tensor"
    )  # no bf16 on either side


def test_a_bf16_run_re_executed_on_another_device_is_judged_as_across_precisions() -> None:
    """Measured on an H200: a CUDA bf16 step re-executed at bf16 on a CPU drifts 0.01-0.1 per
    tensor, beyond any per-tensor bound; on the recording device it is bit-equal."""
    genesis, config = _genesis_here(mode="tolerance")
    config = replace(config, precision="bf16")
    here = reexecution_hardware(config)
    there = "cpu" if here.device == "cuda" else "cuda"
    recorded = replace(genesis.verification_policy.hardware, device=there)
    genesis = replace(
        genesis, verification_policy=replace(genesis.verification_policy, hardware=recorded)
    )
    choice = choose_mode(genesis, config)
    assert (choice.mode, choice.granularity, choice.bound, choice.judge_metric) == (
        "tolerance",
        "stage",
        CROSS_PRECISION_DISTANCE_BOUND,
        False,
    )
    assert f"bf16 on {there} and this re-execution runs bf16 on {here.device}" in choice.reason
    assert choose_mode(genesis, config, requested="bitwise").mode == "bitwise"
    # the same device, or fp32 on both sides: judged tensor by tensor as before
    same = replace(genesis.verification_policy.hardware, device=here.device)
    on_same = replace(
        genesis, verification_policy=replace(genesis.verification_policy, hardware=same)
    )
    assert choose_mode(on_same, config).granularity == "tensor"
    assert choose_mode(genesis, replace(config, precision="fp32")).granularity == "tensor"


def test_a_tolerance_policy_is_tolerance_everywhere() -> None:
    genesis, config = _genesis_here(mode="tolerance")
    assert choose_mode(genesis, config).reason.startswith("the genesis fixed a tolerance policy")


DIMS = 4


def _commitments(
    fingerprints: list[list[float]], digests: list[str], *, start: float = 0.0
) -> InnerCommitments:
    tensors = {"w": (start, 0.0, 0.0, 0.0)}
    return InnerCommitments(
        run_id="r",
        step=1,
        cluster=1,
        stage=0,
        start=ParameterCommitment(digest=f"{int(start):064x}", tensors=tensors),
        inner_steps=tuple(
            InnerStepCommitment(inner_step=20 + k, digest=d, fingerprint=tuple(f))
            for k, (f, d) in enumerate(zip(fingerprints, digests, strict=True))
        ),
        contributed=ParameterCommitment(digest=digests[-1], tensors={"w": tuple(fingerprints[-1])}),
        dims=DIMS,
    )


HONEST = [[float(k + 1), 0.0, 0.0, 0.0] for k in range(6)]  # one unit of update per inner step
DIGESTS = [f"{k:064x}" for k in range(6)]


def test_bitwise_names_the_first_inner_step_whose_digest_differs() -> None:
    forged_digests = DIGESTS[:3] + ["f" * 64] * 3
    verdict = judge_stage(
        _commitments(HONEST, forged_digests),
        _commitments(HONEST, DIGESTS),
        mode="bitwise",
        bound=0.0,
    )
    assert not verdict.ok
    assert verdict.first_disagreement == 23
    dispute = first_dispute([verdict], first_inner_step=20)
    assert dispute is not None and (
        dispute.where,
        dispute.inner_step,
        dispute.offset,
        dispute.stages,
    ) == ("inner step", 23, 3, (0,))


def test_tolerance_forgives_drift_and_names_a_skipped_inner_step() -> None:
    drifted = [[f[0] * (1 + 1e-6), 1e-6, 0.0, 0.0] for f in HONEST]
    verdict = judge_stage(
        _commitments(drifted, DIGESTS),
        _commitments(HONEST, [d[::-1] for d in DIGESTS]),
        mode="tolerance",
        bound=1e-3,
    )
    assert verdict.ok, verdict.describe()

    skipped = HONEST[:2] + [
        [f[0] - 1.0, 0.0, 0.0, 0.0] for f in HONEST[2:]
    ]  # inner step 2 made no progress
    verdict = judge_stage(
        _commitments(skipped, DIGESTS), _commitments(HONEST, DIGESTS), mode="tolerance", bound=1e-3
    )
    assert verdict.first_disagreement == 22
    # one missing unit of update against the two the record claims so far
    assert (
        "first disagreement after inner step 22 (relative distance 0.5 > 0.001)"
        in verdict.describe()
    )


def test_a_cluster_that_did_not_start_from_the_recorded_state_is_named() -> None:
    verdict = judge_stage(
        _commitments(HONEST, DIGESTS, start=5.0),
        _commitments(HONEST, DIGESTS),
        mode="tolerance",
        bound=1e-3,
    )
    dispute = first_dispute([verdict], first_inner_step=20)
    assert dispute is not None and dispute.where == "start"


def test_relative_distances_are_against_the_steps_own_update() -> None:
    start, recorded = torch.zeros(3), torch.tensor([3.0, 4.0, 0.0])
    assert relative_distance(
        recorded, recorded + torch.tensor([0.0, 0.0, 0.05]), start
    ) == pytest.approx(0.01)
    assert relative_distance(start, start, start) == 0.0
    assert relative_distance(start, start + 1e-9, start) == math.inf  # a frozen tensor that moved
    assert global_distance(
        {"a": recorded, "b": start}, {"a": recorded, "b": start + 0.05}, {"a": start, "b": start}
    ) == pytest.approx(math.sqrt(3 * 0.05**2) / 5.0)


def test_verify_flags_a_policy_looser_than_the_published_bounds() -> None:
    genesis, _ = _genesis_here()
    policy = genesis.verification_policy
    assert policy_problems(policy) == []
    loose = replace(
        policy, fallback=replace(policy.fallback, parameter_distance=PARAMETER_DISTANCE_BOUND * 10)
    )
    assert any("expected a parameter distance within" in p for p in policy_problems(loose))
    no_determinism = replace(
        policy,
        hardware=replace(
            policy.hardware, deterministic=replace(policy.hardware.deterministic, algorithms=False)
        ),
    )
    assert policy_problems(no_determinism) == [
        "expected deterministic algorithms under a bitwise policy, the genesis says they were off"
    ]
    gpu_less = replace(policy, hardware=replace(policy.hardware, device="cuda"))
    assert any(
        "expected a CUDA hardware class to name its gpu and cuda" in p
        for p in policy_problems(gpu_less)
    )
