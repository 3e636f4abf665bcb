"""The comm benchmark's JSON, assembled from given measurements (no training)."""

from __future__ import annotations

import pytest

from veritrain.bench.comm_results import LinkReport, assemble, bytes_sent, steady
from veritrain.bench.metrics_recorder import StepMetrics
from veritrain.errors import BenchError

P = 1000  # parameters
C = 2


def step(
    method: str,
    index: int,
    *,
    H: int = 10,
    loss: float = 2.0,
    wall: float = 1.0,
    compute: float = 1.0,
    comm: float = 0.0,
    exposed: float = 0.0,
    payload: list[int] | None = None,
    tokens: float = 100.0,
) -> StepMetrics:
    return StepMetrics(
        step=index,
        inner_steps=H,
        method=method,
        metrics={
            "eval_loss": loss,
            "train_loss": loss + 0.1,
            "tokens": tokens * (index + 1),
            "step_tokens": tokens,
            "wall_seconds": wall,
            "compute_seconds": compute,
            "comm_seconds": comm,
            "exposed_comm_seconds": exposed,
        },
        payload_bytes=payload if payload is not None else [],
    )


def measurements() -> tuple[dict[str, list[StepMetrics]], dict[str, list[StepMetrics]]]:
    convergence = {
        # AllReduce: 2 outer steps of H = 10 at 1 s compute each: 0.1 s per inner step.
        "allreduce": [step("allreduce", 0, loss=3.0), step("allreduce", 1, loss=2.0)],
        "diloco": [
            step("diloco", 0, loss=3.1, payload=[4 * P]),
            step("diloco", 1, loss=2.1, payload=[4 * P]),
        ],
        # DiLoCoX under the delay: nothing applied in step 0, two rounds in the last step.
        "dilocox": [step("dilocox", 0, loss=4.0), step("dilocox", 1, loss=2.1, payload=[20, 20])],
    }
    link = {
        # One outer step of 10 inner steps taking 100 s on the link.
        "allreduce": [step("allreduce", 0, wall=100.0, comm=99.0, exposed=99.0)],
        "diloco": [step("diloco", 0, wall=5.0, comm=4.0, exposed=4.0)],
        # Four outer steps of 2 s; the last one (dropped as the drain) would be 3 s.
        "dilocox": [step("dilocox", i, wall=2.0, comm=0.5, exposed=0.0) for i in range(3)]
        + [step("dilocox", 3, wall=3.0, comm=0.5, exposed=0.5)],
        "dilocox-blocking": [step("dilocox", i, wall=2.5, comm=0.5, exposed=0.5) for i in range(4)],
    }
    return convergence, link


LINK = LinkReport(
    shaping="netns-tc", link_mbit=1.5, measured_mbit=1.45, delay_ms=0.0, derivation={"given": False}
)


def test_headline_fields_from_measurements() -> None:
    convergence, link = measurements()
    result = assemble(convergence=convergence, link_runs=link, parameters=P, clusters=C, link=LINK)
    # AllReduce: 2(C-1)/C · 4 · P · H per outer step = 40,000 B x 2 steps; DiLoCoX: 20 + 20 B.
    assert result["bytes_ratio"] == pytest.approx(80_000 / 40)
    assert result["loss_gap"] == pytest.approx((2.1 - 2.0) / 2.0)
    # 100 tokens in 100 s vs 3 x 100 tokens in 3 x 2 s.
    assert result["speedup"] == pytest.approx(50.0 / 1.0)
    assert result["exposed_comm_reduction"] == pytest.approx(1.0)
    assert (result["shaping"], result["link_mbit"], result["link_measured_mbit"]) == (
        "netns-tc",
        1.5,
        1.45,
    )
    targets = result["targets"]
    assert (
        targets["bytes_ratio"]["met"] and targets["loss_gap"]["met"]
    )  # 2000 >= 1000, 0.05 <= 0.08
    assert not targets["speedup"]["met"]  # 50 < 100


def test_per_method_details() -> None:
    convergence, link = measurements()
    methods = assemble(
        convergence=convergence, link_runs=link, parameters=P, clusters=C, link=LINK
    )["methods"]
    assert methods["allreduce"]["bytes_per_token"] == pytest.approx(80_000 / 200)
    assert methods["diloco"]["bytes_sent"] == 8 * P
    assert [p["eval_loss"] for p in methods["dilocox"]["curve"]] == [4.0, 2.1]
    # Utilisation: 0.1 s of compute per inner step x 10 inner steps / 100 s on the link.
    assert methods["allreduce"]["compute_utilisation"] == pytest.approx(0.01)
    assert methods["dilocox"]["compute_utilisation"] == pytest.approx(0.5)
    assert methods["dilocox-blocking"]["compute_utilisation"] == pytest.approx(0.4)
    assert methods["dilocox-blocking"]["exposed_comm_s_per_outer_step"] == pytest.approx(0.5)
    assert methods["diloco"]["speedup_over_allreduce"] == pytest.approx(20.0)


def test_partial_overlap_reduces_exposure_proportionally() -> None:
    convergence, link = measurements()
    link["dilocox"] = [step("dilocox", i, wall=2.0, exposed=0.1) for i in range(4)]
    result = assemble(convergence=convergence, link_runs=link, parameters=P, clusters=C, link=LINK)
    assert result["exposed_comm_reduction"] == pytest.approx(1 - 0.1 / 0.5)
    assert result["targets"]["exposed_comm_reduction"]["met"]


def test_more_clusters_send_more_per_round() -> None:
    steps = [step("dilocox", 0, payload=[10, 10])]
    assert bytes_sent(steps, parameters=P, clusters=4) == 3 * 20  # (C-1) x payload per round
    # Ring all-reduce: 2(C-1)/C = 1.5 of the gradient bytes at C = 4.
    assert bytes_sent([step("allreduce", 0, H=1)], parameters=P, clusters=4) == pytest.approx(
        1.5 * 4 * P
    )


def test_steady_state_drops_only_the_final_drain_of_longer_runs() -> None:
    three = [step("dilocox", i) for i in range(3)]
    assert [s.step for s in steady(three)] == [0, 1]
    assert [s.step for s in steady(three[:2])] == [0, 1]


def test_missing_runs_are_named() -> None:
    convergence, link = measurements()
    del link["dilocox-blocking"]
    with pytest.raises(BenchError, match="dilocox-blocking"):
        assemble(convergence=convergence, link_runs=link, parameters=P, clusters=C, link=LINK)
