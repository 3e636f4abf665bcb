"""Auditing across hardware and localising disputes, on real recorded runs (docs/auditing.md):

* a cluster that skipped inner step 7 of 12 is named by ``reproduce --bisect``, bitwise and
  under the tolerance, with what the bisection cost;
* ``reproduce --cluster J`` of an honest cluster matches, downloading less than half of a full
  fetch, and over the HTTP API fetches the token windows by Range;
* a run trained in bf16 with activation checkpointing verifies; reproduced in fp32 it passes under
  the tolerance and fails bitwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from e2e.recorded_runs import with_light_extras

from trainer.api import train
from trainer.config import with_overrides
from trainer.execution import Execution
from trainer.presets import run_preset
from trainer.runtime.forgery import Forgery
from veritrain.audit.reproduce import reproduce_step
from veritrain.audit.verify import verify_run
from veritrain.record.training import recorder_factory
from veritrain.settings import Settings, load_settings
from veritrain.sources import DirectSource
from veritrain.sources.api import ApiSource
from veritrain.sources.recorded_run import RecordedRun
from web.settings import WebSettings

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

H = 12
SKIPPED = 7
FORGER = 1


def _record(
    data_dir: Path,
    run_id: str,
    *,
    inner_steps: int,
    forgery: Forgery | None = None,
    precision: str = "fp32",
    activation_checkpointing: bool = False,
) -> Settings:
    """A 2-cluster, 1-stage DiLoCoX run of the tiny preset, two outer steps, into a real ledger,
    with the e2e runs' light extras (these tests judge bits, tolerances and downloads, not loss
    levels)."""
    settings = load_settings(data_dir=data_dir)
    config = with_light_extras(
        with_overrides(
            run_preset("tiny"),
            run_id=run_id,
            method="dilocox",
            stages=1,
            outer_steps=2,
            inner_steps=inner_steps,
        )
    )
    config = replace(
        config,
        precision=precision,  # type: ignore[arg-type]
        activation_checkpointing=activation_checkpointing,
    )
    train(
        config,
        recorder_factory(settings),
        data_dir=data_dir / "corpus",
        quiet=True,
        forgery=forgery,
    )
    return settings


@pytest.fixture(scope="module")
def forged_run(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Cluster 1 skips inner step 7 of outer step 1 -- and records an honest-looking run."""
    forgery = Forgery(cluster=FORGER, step=1, kind="skip_inner_step", inner_step=SKIPPED)
    return _record(
        tmp_path_factory.mktemp("forged") / "veritrain-data",
        "forged",
        inner_steps=H,
        forgery=forgery,
    )


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Trained the memory-saving way: bf16 autocast and every decoder layer recomputed."""
    return _record(
        tmp_path_factory.mktemp("bf16") / "veritrain-data",
        "bf16",
        inner_steps=4,
        precision="bf16",
        activation_checkpointing=True,
    )


@pytest.mark.parametrize("mode", ["auto", "tolerance"])
def test_bisect_names_the_inner_step_a_cluster_skipped(forged_run: Settings, mode: str) -> None:
    with DirectSource(forged_run) as source:
        chosen: Any = mode
        comparison = reproduce_step(source, "forged", 1, cluster=FORGER, mode=chosen, bisect=True)

    assert not comparison.ok
    assert comparison.mode == ("bitwise" if mode == "auto" else "tolerance")
    bisection = comparison.bisection
    assert bisection is not None
    [dispute] = bisection.disputes
    first = H  # outer step 1 starts at global inner step H
    assert (dispute.cluster, dispute.where, dispute.inner_step, dispute.offset) == (
        FORGER,
        "inner step",
        first + SKIPPED,
        SKIPPED,
    )
    text = comparison.render()
    assert (
        f"first disagreeing inner step {first + SKIPPED} "
        f"(inner step {SKIPPED} of {H} in this outer step)" in text
    )
    assert f"cost: 1 cluster(s) x {H} inner steps re-executed in" in text
    assert bisection.commitments_compared == H + 2 and bisection.downloaded > 0


def test_an_honest_cluster_matches_downloading_less_than_half_of_a_full_fetch(
    forged_run: Settings,
) -> None:
    with DirectSource(forged_run) as source:
        comparison = reproduce_step(source, "forged", 1, cluster=0, bisect=True)

    assert comparison.ok, comparison.render()
    assert comparison.bisection is not None and comparison.bisection.disputes == ()
    download = comparison.download
    assert download is not None
    assert download.downloaded < download.full_fetch / 2, download.describe()
    assert download.ranges > 0  # token windows by range, not whole shards


def test_over_the_api_the_windows_come_by_range_and_match(
    forged_run: Settings, serve_app: Callable[[WebSettings], str]
) -> None:
    url = serve_app(forged_run)  # Settings has every field the app reads
    with ApiSource(url) as source:
        comparison = reproduce_step(source, "forged", 0, cluster=FORGER)

    assert comparison.ok, comparison.render()
    assert comparison.download is not None and comparison.download.ranges > 0


def test_a_bf16_run_reproduced_in_fp32_passes_the_tolerance_and_fails_bitwise(
    bf16_run: Settings,
) -> None:
    fp32 = Execution(precision="fp32")
    with DirectSource(bf16_run) as source:
        tolerant = reproduce_step(source, "bf16", 1, execution=fp32)
        strict = reproduce_step(source, "bf16", 1, execution=fp32, mode="bitwise")

    assert tolerant.ok, tolerant.render()
    assert tolerant.mode == "tolerance"
    assert "the run trained at bf16 and this re-execution runs at fp32" in tolerant.reason
    assert any(m.startswith("all ") and "model tensors at once" in m for m in tolerant.matched), (
        tolerant.render()
    )
    assert not strict.ok
    assert any(
        "commitments of cluster" in m and "digests differ" in m for m in strict.mismatched
    ), strict.render()


def test_a_bf16_run_with_activation_checkpointing_records_both_and_verifies(
    bf16_run: Settings,
) -> None:
    with DirectSource(bf16_run) as source:
        report = verify_run(source, "bf16")
        hyperparameters = RecordedRun.load(source, "bf16").genesis.hyperparameters
    assert report.ok, report.render()
    assert hyperparameters["precision"] == "bf16"
    assert hyperparameters["activation_checkpointing"] is True
