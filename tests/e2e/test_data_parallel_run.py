"""A run with data parallelism inside each cluster (C 2 x S 2 x D 2: 8 processes) is recorded
to the ledger, verifies, every step reproduces bit for bit on the machine that trained, and
each replica put half of its stage's payload on the wire between clusters."""

from __future__ import annotations

import json

import pytest

from records.genesis import Genesis
from trainer.config import with_overrides
from trainer.presets import run_preset
from veritrain.audit.reproduce import reproduce_step
from veritrain.audit.verify import verify_run
from veritrain.record.training import train_recorded
from veritrain.settings import Settings, load_settings
from veritrain.sources import DirectSource
from veritrain.sources.base import read_verified

RUN_ID = "e2e-dp"
OUTER_STEPS = 2


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    settings = load_settings(data_dir=tmp_path_factory.mktemp("dp") / "veritrain-data")
    config = with_overrides(
        run_preset("tiny"), run_id=RUN_ID, outer_steps=OUTER_STEPS, inner_steps=2, data_parallel=2
    )
    assert (config.clusters, config.stages, config.data_parallel) == (2, 2, 2)
    train_recorded(settings, config, quiet=True)
    return settings


@pytest.mark.slow
def test_the_genesis_names_eight_processes_and_the_run_verifies(dp_run: Settings) -> None:
    with DirectSource(dp_run) as source:
        genesis = Genesis.from_payload(json.loads(source.entry_bodies(RUN_ID)[0])["payload"])
        report = verify_run(source, RUN_ID)

    assert genesis.topology.data_parallel == 2
    assert genesis.topology.world_size == 8
    assert report.ok, report.render()


@pytest.mark.slow
def test_each_replica_sends_half_of_its_stages_payload(dp_run: Settings) -> None:
    with DirectSource(dp_run) as source:
        bodies = [json.loads(b)["payload"] for b in source.entry_bodies(RUN_ID)]
        steps = [b for b in bodies if "applied" in b and "metrics" in b]
        assert len(steps) == OUTER_STEPS
        for record in steps:
            digests = record["applied"][0]["contribution_digests"]
            lengths = {
                (d["cluster"], d["stage"]): len(read_verified(source, d["digest"], 1 << 26))
                for d in digests
            }
            metrics = record["metrics"]
            # What a cluster without data parallelism puts on the wire: every stage's payload.
            assert metrics["bytes_sent"] == sum(n for (c, _), n in lengths.items() if c == 0)
            # With D = 2, one process (replica) sends half of its stage's payload, as measured.
            assert metrics["bytes_sent_per_replica"] * 2 == max(lengths.values())


@pytest.mark.slow
@pytest.mark.parametrize("step", range(OUTER_STEPS))
def test_every_step_reproduces_bitwise(step: int, dp_run: Settings) -> None:
    with DirectSource(dp_run) as source:
        comparison = reproduce_step(source, RUN_ID, step)

    assert comparison.ok, comparison.render()
    assert comparison.mode == "bitwise"
