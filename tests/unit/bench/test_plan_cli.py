"""``veritrain plan`` as a user runs it (typer's runner over the real command)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from veritrain.cli.main import app

runner = CliRunner()


def test_107b_at_the_papers_topology_says_what_does_not_fit() -> None:
    result = runner.invoke(app, ["plan"])
    assert result.exit_code == 0, result.output
    assert "107.13 B parameters on C=2 clusters x S=8 stages x D=2 replicas" in result.output
    assert "does NOT fit in 80 GB per GPU" in result.output
    assert "S=32, outer state on host memory: D >= 2 (64 GPUs per cluster)" in result.output


def test_json_plan_fits_when_given_enough_gpus() -> None:
    result = runner.invoke(
        app, ["plan", "--stages", "32", "--data-parallel", "2", "--offload-outer", "--json"]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["fits"] is True and plan["alternatives"] == []
    assert plan["parameters"] == 107_132_971_008
    assert 0.99 < plan["comm"]["allreduce_comm_fraction"] < 1.0
    assert all(stage["total_bytes"] <= 80e9 for stage in plan["stages"])


def test_rank_and_bits_change_the_payload() -> None:
    sizes = {}
    for bits in ("8", "4"):
        result = runner.invoke(app, ["plan", "--bits", bits, "--json"])
        assert result.exit_code == 0, result.output
        sizes[bits] = json.loads(result.output)["comm"]["dilocox_payload_bytes"]
    assert sizes["4"] < sizes["8"]
    refused = runner.invoke(app, ["plan", "--bits", "3"])
    assert refused.exit_code != 0


def test_a_run_preset_is_planned_with_its_own_dilocox_settings() -> None:
    tiny = [
        "plan",
        "--preset",
        "tiny",
        "--stages",
        "2",
        "--data-parallel",
        "1",
        "--inner-steps",
        "25",
    ]
    result = runner.invoke(app, tiny)
    assert result.exit_code == 0, result.output
    assert "DiLoCoX (rank 28, int2, 1-D int8)" in result.output  # the tiny preset's settings
    own = json.loads(runner.invoke(app, [*tiny, "--json"]).output)
    int4 = json.loads(runner.invoke(app, [*tiny, "--bits", "4", "--json"]).output)
    assert own["outer"]["bits"] == 2 and int4["outer"]["bits"] == 4
    assert own["comm"]["bytes_ratio"] > 1000 > int4["comm"]["bytes_ratio"]


def test_held_trainer_plans_what_the_trainer_holds_with_the_outer_state_on_the_host() -> None:
    result = runner.invoke(
        app,
        [
            "plan",
            "--preset",
            "small",
            "--stages",
            "2",
            "--data-parallel",
            "2",
            "--held",
            "trainer",
            "--precision",
            "fp32",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["held"] == "trainer"
    items = {item["name"]: item["bytes"] for item in plan["stages"][0]["items"]}
    parameters = plan["stages"][0]["parameters"]
    # No sharding over D: every replica holds its stage's fp32 weights, gradients and both moments.
    assert (items["weights"], items["gradients"], items["inner AdamW state"]) == (
        4 * parameters,
        4 * parameters,
        8 * parameters,
    )
    assert items["headroom"] == 0
    # The outer state lives in host memory (trainer/outer/nesterov.py HOME), not on the GPU.
    assert plan["outer"]["offload_outer"] is True
    assert all(b == 0 for name, b in items.items() if name.startswith("outer"))


def test_the_qwen2_presets_are_planned_on_one_gpu() -> None:
    for preset, parameters in (("qwen2-0.5b", 387_258_240), ("qwen2-1.5b", 1_360_672_256)):
        result = runner.invoke(
            app,
            [
                *("plan", "--preset", preset, "--stages", "1", "--data-parallel", "1"),
                *("--held", "trainer", "--seq-len", "1024", "--micro-batch-size", "8", "--json"),
            ],
        )
        assert result.exit_code == 0, result.output
        plan = json.loads(result.output)
        assert plan["parameters"] == parameters
        assert plan["fits"] is True, (preset, plan["stages"][0]["total_bytes"])
