"""A recorded DiLoCoX run with the short overlap (``OuterConfig.apply_delay``: round t's exchange
applied τ inner steps into round t+1; the real multi-process trainer over torchft into a real
ledger and store): the genesis records τ, ``veritrain verify`` recomputes every verdict and the
weights from the signed payloads, and ``veritrain reproduce`` re-executes a step whose apply
landed mid-round, whole and one cluster alone, bitwise."""

from __future__ import annotations

from dataclasses import replace

import pytest
from e2e.recorded_runs import small_run_config

from trainer.checkpoint_layout import CheckpointFiles
from trainer.config import with_overrides
from trainer.execution import Execution
from veritrain.audit.contributions import round_in_flight
from veritrain.audit.reproduce import reproduce_step, verified_run
from veritrain.audit.verify import verify_run
from veritrain.errors import ReproduceError
from veritrain.record.training import train_recorded
from veritrain.settings import Settings, load_settings
from veritrain.sources import DirectSource
from veritrain.sources.recorded_run import RecordedRun

RUN_ID = "short-overlap"
DELAY = 3
"""τ: the preset's rounds at T = 3, H = 8 are 12, 6, 6 (no warm-up round: round 0's exchange
lands 3 steps into round 1 like every other)."""


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    settings = load_settings(data_dir=tmp_path_factory.mktemp("short") / "veritrain-data")
    base = with_overrides(small_run_config(RUN_ID, outer_steps=3), method="dilocox")
    config = replace(base, outer=replace(base.outer, apply_delay=DELAY))
    train_recorded(settings, config, quiet=True)
    return settings


def test_the_genesis_records_the_delay_and_each_step_applies_the_round_before(
    short_run: Settings,
) -> None:
    with DirectSource(short_run) as source:
        run = RecordedRun.load(source, RUN_ID)
        assert run.genesis.hyperparameters["outer"]["apply_delay"] == DELAY
        assert "sync_rounds" not in run.genesis.hyperparameters["outer"]
        assert [[a.round for a in step.applied] for _, step in run.outer_steps] == [[], [0], [1, 2]]


def test_verify_and_reproduce_follow_the_mid_round_apply(short_run: Settings) -> None:
    with DirectSource(short_run) as source:
        report = verify_run(source, RUN_ID, deep=True)
        whole = reproduce_step(source, RUN_ID, 2)
        alone = reproduce_step(source, RUN_ID, 2, cluster=1)
    assert report.ok, report.render()
    assert whole.ok, whole.render()
    assert whole.mode == "bitwise"
    assert alone.ok, alone.render()


@pytest.mark.parametrize("cluster", [None, 1])
def test_under_tolerance_the_payloads_decode_on_the_bases_the_mid_round_apply_made(
    short_run: Settings, cluster: int | None
) -> None:
    """Step 1 applies round 0 three inner steps in, and that exchange refreshes the bases round
    1's payloads are encoded on: the state before step 1 holds none for round 1 yet. Re-executed
    at another precision, reproduce decodes the signed and the re-executed payloads after
    committing round 0 as its record says."""
    with DirectSource(short_run) as source:
        comparison = reproduce_step(
            source, RUN_ID, 1, cluster=cluster, execution=Execution(precision="fp64")
        )
    assert comparison.ok, comparison.render()
    assert comparison.mode == "tolerance"
    assert any(
        m.startswith("contribution of cluster 1 stage 1 (") and "of the recorded payload" in m
        for m in comparison.matched
    ), comparison.render()


def test_a_mid_round_apply_without_a_quorum_clusters_payload_is_refused(
    short_run: Settings,
) -> None:
    """Defence in depth behind verify's check 6: a step whose record says it applied the
    previous round without one of that round's quorum payloads cannot be decoded as recorded
    (its payloads sit on bases that exchange made), so reproduce names what is missing instead
    of decoding on a guess. The edit is made in memory: on the ledger it would need re-signing."""
    with DirectSource(short_run) as source:
        run, config = verified_run(source, RUN_ID)
        previous, recorded = run.step(0), run.step(1)
        edited = replace(
            recorded,
            applied=tuple(
                replace(
                    a,
                    contribution_digests=tuple(c for c in a.contribution_digests if c.cluster != 0),
                )
                for a in recorded.applied
            ),
        )
        empty = CheckpointFiles()  # no saved pending payloads: they are read from the store
        assert round_in_flight(source, config, recorded, previous, empty, {}) is not None
        with pytest.raises(ReproduceError, match="applied round 0 without cluster 0's stage 0"):
            round_in_flight(source, config, edited, previous, empty, {})
