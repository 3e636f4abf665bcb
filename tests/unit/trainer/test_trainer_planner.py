"""The planner's arithmetic, checked against hand-computed numbers and against the code it
describes (the model's parameters, the DiLoCoX codec's payload length)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from trainer.errors import ConfigError
from trainer.model import TIED_HEAD, ModelConfig, build_stage
from trainer.outer.accounting import allreduce_bytes_per_outer_step
from trainer.outer.config import OuterConfig
from trainer.outer.lowrank_codec import LowRankCodec
from trainer.planner import (
    GB,
    Accelerator,
    CommPlan,
    Placement,
    Workload,
    bandwidth_for_comm_fraction,
    block_activation_bytes,
    fitting_alternatives,
    payload_bytes,
    plan,
    stage_parameter_shapes,
)
from trainer.presets import MODEL_PRESETS, RUN_PRESETS

# 2 layers, hidden 64, MLP 128, 2 query heads of 32 sharing 1 key/value head, vocabulary 256,
# Qwen2 (biases on q/k/v), tied. By hand: embed_tokens 256·64 = 16,384; per layer: q 64·64 + 64
# = 4,160, k and v 32·64 + 32 = 2,080 each, o 64·64 = 4,096, gate, up and down 128·64 = 8,192
# each, two norms 128 -> 37,120; final norm 64. Total 16,384 + 2·37,120 + 64 = 90,688.
SMALL = ModelConfig(
    vocab_size=256,
    context=64,
    num_hidden_layers=2,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=2,
    num_key_value_heads=1,
)
SMALL_PARAMETERS = 90_688


def test_small_model_parameters_match_the_hand_count() -> None:
    assert SMALL.parameter_count() == SMALL_PARAMETERS
    shapes = stage_parameter_shapes(SMALL, stage=0, stages=1)
    assert sum(math.prod(s) for _, s in shapes) == SMALL_PARAMETERS


@pytest.mark.parametrize(
    ("model", "stages"),
    [
        (MODEL_PRESETS["tiny"], 1),
        (MODEL_PRESETS["tiny"], 2),
        (
            ModelConfig(
                family="llama",
                vocab_size=96,
                context=16,
                num_hidden_layers=3,
                hidden_size=32,
                intermediate_size=48,
                num_attention_heads=4,
                num_key_value_heads=2,
                tie_word_embeddings=False,
            ),
            3,
        ),
        (
            ModelConfig(
                vocab_size=96,
                context=16,
                num_hidden_layers=3,
                hidden_size=32,
                intermediate_size=48,
                num_attention_heads=4,
                num_key_value_heads=2,
                tie_word_embeddings=False,
            ),
            2,
        ),
    ],
)
def test_shapes_are_exactly_those_of_the_built_stages(model: ModelConfig, stages: int) -> None:
    for stage in range(stages):
        built = build_stage(model, stage=stage, n_stages=stages, seed=0)
        assert stage_parameter_shapes(model, stage=stage, stages=stages) == [
            (name, tuple(p.shape)) for name, p in built.named_parameters()
        ]


def dilocox(**fields: object) -> OuterConfig:
    """A DiLoCoX configuration that names every field the payload depends on (the repository's
    defaults are still being tuned; these tests must not depend on them)."""
    base = {
        "kind": "dilocox",
        "rank": 16,
        "bits": 8,
        "quant_block": 64,
        "min_compress_dim": 32,
        "two_sided": True,
        "adaptive_rank": False,
        "min_rank": 1,
        "max_rank": 64,
    }
    return OuterConfig(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize("two_sided", [True, False])
@pytest.mark.parametrize(("bits", "dense_bits"), [(8, 16), (4, 16), (2, 16), (4, 8), (2, 8)])
def test_payload_bytes_equal_the_codec_payload_length(
    two_sided: bool, bits: int, dense_bits: int
) -> None:
    """The planner's formula must describe what trainer/outer actually sends (round 0 uses a
    right basis when one-sided)."""
    model, outer = (
        MODEL_PRESETS["tiny"],
        dilocox(two_sided=two_sided, bits=bits, dense_bits=dense_bits),
    )
    for stage in range(2):
        shapes = [
            s
            for name, s in stage_parameter_shapes(model, stage=stage, stages=2)
            if name != TIED_HEAD
        ]
        codec = LowRankCodec(outer, shapes=[torch.Size(s) for s in shapes], seed=0, lag=2)
        assert payload_bytes(shapes, outer, side="right") == codec.payload_length(0)


def test_payload_bytes_by_hand() -> None:
    # A 128x64 matrix at rank 4, two-sided int8 in blocks of 64: A = 128·4 = 512 elements
    # (8 blocks: 512 B codes + 16 B scales), B = 64·4 = 256 (4 blocks: 256 + 8) -> 792 B;
    # a 64-vector in bf16: 128 B; a 16x64 matrix (side < min_compress_dim 32) in bf16: 2048 B.
    outer = dilocox(rank=4)
    assert payload_bytes([(128, 64), (64,), (16, 64)], outer) == 792 + 128 + 2048
    # int4: codes are half a byte each -> A 256 + 16, B 128 + 8; int2: a quarter.
    assert payload_bytes([(128, 64)], dilocox(rank=4, bits=4)) == 256 + 16 + 128 + 8
    assert payload_bytes([(128, 64)], dilocox(rank=4, bits=2)) == 128 + 16 + 64 + 8
    # Tensors sent whole as int8 blocks: the 64-vector is one block, 64 B + a 2 B scale.
    assert payload_bytes([(64,)], dilocox(dense_bits=8)) == 64 + 2
    # One-sided: A on a right basis, B on a left one, alternating; the plan uses their mean.
    one = dilocox(rank=4, two_sided=False)
    assert payload_bytes([(128, 64)], one, side="right") == 528
    assert payload_bytes([(128, 64)], one, side="left") == 264
    assert payload_bytes([(128, 64)], one) == 396
    # The rank is capped at half the smaller side: rank 64 on a 128x64 matrix is rank 32.
    assert payload_bytes([(128, 64)], dilocox(rank=64)) == payload_bytes(
        [(128, 64)], dilocox(rank=32)
    )
    # Plain DiLoCo sends fp32.
    assert payload_bytes([(128, 64), (64,)], OuterConfig(kind="diloco")) == 4 * (128 * 64 + 64)


def test_memory_items_by_hand_for_one_stage() -> None:
    result = plan(
        SMALL,
        placement=Placement(clusters=2, stages=1, data_parallel=1),
        workload=Workload(sequence_length=64, micro_batches=1),
        accelerator=Accelerator(headroom_gb=0.0),
        outer=dilocox(),
    )
    items = {item.name: item.bytes for item in result.stages[0].items}
    P = SMALL_PARAMETERS
    assert items["weights"] == 2 * P and items["gradients"] == 2 * P
    assert items["inner AdamW state"] == 12 * P
    assert items["outer global copy"] == items["outer momentum"] == items["error feedback"] == 4 * P
    assert items["one-step-delay references"] == 8 * P
    # Recomputation: 2 block inputs (64 tokens x 64 x 2 B) + one block's full activations
    # (64 tokens x 2 B x (4·64 + (64 + 2·32) + 64 + 4·128) = 122,880) + fp32 logits 64 x 256 x 4.
    assert items["activations"] == 2 * 64 * 64 * 2 + 122_880 + 64 * 256 * 4
    assert block_activation_bytes(SMALL, tokens=64, bytes_per_element=2) == 122_880
    assert result.stages[0].total_bytes == pytest.approx(36 * P + 204_800)
    assert result.fits


def test_data_parallel_shards_optimiser_and_outer_state_but_not_weights() -> None:
    def items(d: int) -> dict[str, float]:
        result = plan(
            SMALL, placement=Placement(clusters=2, stages=1, data_parallel=d), outer=dilocox()
        )
        return {item.name: item.bytes for item in result.stages[0].items}

    one, four = items(1), items(4)
    assert four["weights"] == one["weights"] and four["gradients"] == one["gradients"]
    assert four["inner AdamW state"] == one["inner AdamW state"] / 4
    assert four["outer momentum"] == one["outer momentum"] / 4


def test_tied_copy_trains_on_the_last_stage_but_holds_no_outer_state() -> None:
    result = plan(
        SMALL, placement=Placement(clusters=2, stages=2, data_parallel=1), outer=dilocox()
    )
    last = result.stages[1]
    items = {item.name: item.bytes for item in last.items}
    wte = 256 * 64
    assert items["weights"] == 2 * last.parameters
    assert items["outer global copy"] == 4 * (last.parameters - wte)


def test_offloading_the_outer_state_removes_it_from_the_gpu() -> None:
    result = plan(
        SMALL,
        placement=Placement(clusters=2, stages=1, data_parallel=1),
        offload_outer=True,
        outer=dilocox(),
    )
    items = {item.name: item.bytes for item in result.stages[0].items}
    assert (
        items["outer global copy"]
        == items["outer momentum"]
        == items["one-step-delay references"]
        == 0
    )


def test_communication_by_hand() -> None:
    # C = 2: a ring all-reduce sends 2(C-1)/C = 1 x the fp32 gradients per inner step.
    result = plan(
        SMALL,
        placement=Placement(clusters=2, stages=1, data_parallel=1),
        link_mbit=8.0,
        inner_steps=10,
        workload=Workload(sequence_length=64, micro_batches=1),
        outer=OuterConfig(kind="diloco"),
    )
    comm = result.comm
    assert comm.allreduce_bytes_per_inner_step == 4 * SMALL_PARAMETERS
    assert comm.allreduce_comm_seconds_per_inner_step == pytest.approx(4 * SMALL_PARAMETERS / 1e6)
    # Plain DiLoCo all-gathers fp32 once per outer step: (C-1) x 4P bytes.
    assert comm.dilocox_bytes_per_outer_step == 4 * SMALL_PARAMETERS
    assert comm.bytes_ratio == pytest.approx(10.0)
    # 8 FLOPs per parameter per token with recomputation, 64 tokens, one GPU at 312 TFLOP/s x 0.4.
    assert comm.compute_seconds_per_inner_step == pytest.approx(
        8 * SMALL_PARAMETERS * 64 / (312e12 * 0.4)
    )


def test_step_times_speedup_and_the_h_that_hides_the_exchange() -> None:
    comm = CommPlan(
        link_mbit=1.0,
        inner_steps=10,
        tokens_per_inner_step=100,
        compute_seconds_per_inner_step=1.0,
        allreduce_bytes_per_inner_step=9.0,
        allreduce_comm_seconds_per_inner_step=9.0,
        dilocox_payload_bytes=5,
        dilocox_bytes_per_outer_step=5.0,
        dilocox_comm_seconds_per_outer_step=5.0,
        overlapped=True,
    )
    assert comm.allreduce_comm_fraction == pytest.approx(0.9)
    assert comm.allreduce_seconds_per_outer_step == pytest.approx(100.0)
    assert comm.dilocox_exposed_seconds_per_outer_step == 0.0
    assert comm.speedup == pytest.approx(10.0)
    assert comm.inner_steps_to_hide == 5
    blocking = dataclasses.replace(comm, overlapped=False)
    assert blocking.dilocox_exposed_seconds_per_outer_step == 5.0
    assert blocking.speedup == pytest.approx(100 / 15)
    short = dataclasses.replace(comm, inner_steps=2)  # 2 s of compute cannot hide 5 s
    assert short.dilocox_exposed_seconds_per_outer_step == pytest.approx(3.0)


def test_bandwidth_for_a_communication_fraction() -> None:
    # Half the step communicating, 1 s of compute: 1 MB must take 1 s -> 8 Mbit/s.
    assert bandwidth_for_comm_fraction(
        bytes_per_step=1e6, compute_seconds_per_step=1.0, fraction=0.5
    ) == pytest.approx(8.0)
    # 99 %: the transfer takes 99 s.
    assert bandwidth_for_comm_fraction(
        bytes_per_step=1e6, compute_seconds_per_step=1.0, fraction=0.99
    ) == pytest.approx(8 / 99)
    with pytest.raises(ConfigError, match="fraction in"):
        bandwidth_for_comm_fraction(bytes_per_step=1e6, compute_seconds_per_step=1.0, fraction=1.0)


def test_the_107b_preset_at_the_papers_topology() -> None:
    model = MODEL_PRESETS["qwen1.5-107b"]
    result = plan(
        model,
        placement=Placement(clusters=2, stages=8, data_parallel=2),
        link_mbit=1000.0,
        outer=dilocox(),
    )
    assert result.parameters == 107_132_971_008
    # fp32 gradients, C = 2: 4 x 107.1e9 bytes per inner step, 125 MB/s at 1 Gbps.
    assert result.comm.allreduce_comm_seconds_per_inner_step == pytest.approx(
        4 * 107_132_971_008 / 125e6
    )
    # Stage 0: 10 blocks + the embedding; bf16 weights alone are 29.7 GB of the 80.
    stage0 = result.stages[0]
    assert stage0.parameters == 10 * model.block_parameter_count() + 152_064 * 8192
    assert {i.name: i.bytes for i in stage0.items}["weights"] == pytest.approx(29.67 * GB, rel=1e-3)
    assert not result.fits
    alternatives = fitting_alternatives(model, placement=result.placement, outer=dilocox())
    assert "S=32, outer state on host memory: D >= 2 (64 GPUs per cluster)" in alternatives


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ConfigError, match="stages"):
        plan(SMALL, placement=Placement(stages=3))  # 3 stages for 2 blocks
    with pytest.raises(ConfigError, match="data_parallel"):
        Placement(data_parallel=0)
    with pytest.raises(ConfigError, match="bandwidth"):
        plan(SMALL, placement=Placement(stages=1), link_mbit=0.0)


def test_the_wide_preset_compresses_a_round_more_than_tiny_at_the_same_rank() -> None:
    """docs/benchmarks.md's width study: at rank 28 int4 one-sided, H = 25 inner steps and 2
    clusters, AllReduce sends over 1,000 times DiLoCoX's bytes for `tiny-wide` (160-wide
    matrices) and about 500 times for `tiny` (64-wide)."""
    outer = dilocox(rank=28, bits=4, two_sided=False)

    def allreduce_over_dilocox(preset: str) -> float:
        model = MODEL_PRESETS[preset]
        payload = sum(
            payload_bytes([s for _, s in stage_parameter_shapes(model, stage=i, stages=2)], outer)
            for i in range(2)
        )
        return 4 * model.parameter_count() * 25 / payload  # 2(C-1)/C fp32 gradients per step, C = 2

    assert 450 < allreduce_over_dilocox("tiny") < 600
    assert allreduce_over_dilocox("tiny-wide") > 1000


def test_the_tiny_preset_sends_a_thousandth_of_allreduce_bytes_at_the_bench_horizon() -> None:
    """tiny's DiLoCoX settings (int2 factors, int8 tensors sent whole) put the quick comm
    bench's H = 25 above 1,000x fewer bytes than AllReduce; the int4 defaults do not."""
    run = RUN_PRESETS["tiny"]
    shapes = [
        s
        for stage in range(run.stages)
        for _, s in stage_parameter_shapes(run.model, stage=stage, stages=run.stages)
    ]
    held = sum(math.prod(s) for s in shapes)  # both stages' copies of the tied embedding included
    allreduce = allreduce_bytes_per_outer_step(parameters=held, n_clusters=2, inner_steps=25)
    tiny = dataclasses.replace(run.outer, kind="dilocox")
    assert (tiny.bits, tiny.dense_bits) == (2, 8)
    assert allreduce / payload_bytes(shapes, tiny) > 1000
    assert allreduce / payload_bytes(shapes, OuterConfig(kind="dilocox")) < 600
