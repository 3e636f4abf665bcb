"""``OuterConfig.exchange = "auto"`` follows the cluster count: compressed DiLoCoX all-gathers at
2 clusters and combines by owners from 3, the genesis records the exchange that ran (never
"auto"), and a genesis that names none still reads as the all-gather it was. The default is the
all-gather at any count (a restarted cluster cannot rejoin an owner-reduce run yet)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from trainer.config import TrainConfig, load_config_file, with_overrides
from trainer.presets import run_preset


def dilocox(clusters: int) -> TrainConfig:
    """Compressed DiLoCoX at ``clusters`` clusters with ``exchange="auto"``."""
    run = with_overrides(run_preset("tiny"), method="dilocox", clusters=clusters)
    return replace(run, outer=replace(run.outer, exchange="auto"))


@pytest.mark.parametrize("clusters", [2, 3, 4, 8])
def test_the_default_exchange_is_the_all_gather_at_any_cluster_count(clusters: int) -> None:
    config = with_overrides(run_preset("tiny"), method="dilocox", clusters=clusters)

    assert config.outer.exchange_in_use == "all-gather" and config.outer.contribution_scores
    assert "exchange" not in config.to_dict()["outer"]  # written as before the choice existed


@pytest.mark.parametrize(
    ("clusters", "exchange"), [(2, "all-gather"), (3, "owner-reduce"), (4, "owner-reduce")]
)
def test_auto_resolves_from_the_cluster_count(clusters: int, exchange: str) -> None:
    config = dilocox(clusters)

    assert config.outer.exchange == "auto"
    assert config.outer.exchange_in_use == exchange
    assert config.outer.owner_reduce is (exchange == "owner-reduce")
    # Owners never hold a whole contribution, so the scores follow the exchange.
    assert config.outer.contribution_scores is (exchange == "all-gather")


def test_the_genesis_records_the_resolved_exchange_never_auto() -> None:
    four = dilocox(4).to_dict()["outer"]
    two = dilocox(2).to_dict()["outer"]

    assert (four["exchange"], four["anomaly_scores"]) == ("owner-reduce", False)
    # At 2 clusters the configuration is written exactly as before the default existed.
    assert "exchange" not in two and two["anomaly_scores"] is True
    for clusters in (2, 4):
        config = dilocox(clusters)
        back = TrainConfig.from_dict(json.loads(json.dumps(config.to_dict())))
        assert back == config and back.digest_text() == config.digest_text()
        assert back.outer.exchange_in_use == config.outer.exchange_in_use


def test_a_genesis_without_an_exchange_reads_as_the_all_gather_it_ran() -> None:
    # What a 4-cluster DiLoCoX run recorded before the default changed.
    recorded = dilocox(4).to_dict()
    del recorded["outer"]["exchange"]
    recorded["outer"]["anomaly_scores"] = True

    config = TrainConfig.from_dict(recorded)

    assert config.outer.exchange_in_use == "all-gather" and config.outer.contribution_scores
    assert config.to_dict() == recorded  # reads back as itself: verify's check 10a


def test_replace_resolves_again_for_the_new_cluster_count() -> None:
    two = dilocox(2)
    assert replace(two, clusters=4).outer.exchange_in_use == "owner-reduce"
    assert replace(dilocox(4), clusters=2).outer.exchange_in_use == "all-gather"
    # ... and so does an outer section replaced on its own, once back in a run.
    outer = replace(dilocox(4).outer, bits=4)
    assert replace(two, clusters=4, outer=outer).outer.exchange_in_use == "owner-reduce"


def test_the_all_gather_stays_where_the_owner_reduce_cannot_run() -> None:
    # Plain DiLoCo (the tiny preset's own method) always all-gathers, and records nothing new.
    diloco = replace(run_preset("tiny"), clusters=4)
    assert diloco.outer.exchange_in_use == "all-gather"
    assert "exchange" not in diloco.to_dict()["outer"]
    # Replicas inside a cluster do not split the owners' shares: auto all-gathers there.
    replicas = replace(dilocox(4), data_parallel=2, micro_batch_size=4)
    assert replicas.outer.exchange_in_use == "all-gather"
    # Scores asked for outright keep the all-gather, which can compute them.
    scored = replace(dilocox(4), outer=replace(dilocox(4).outer, anomaly_scores=True))
    assert scored.outer.exchange_in_use == "all-gather" and scored.outer.contribution_scores
    # ... and an explicit exchange is what runs, whatever the count.
    gather = replace(dilocox(4), outer=replace(dilocox(4).outer, exchange="all-gather"))
    assert gather.outer.exchange_in_use == "all-gather"
    assert "exchange" not in gather.to_dict()["outer"]


def test_a_config_file_names_auto_or_gets_the_default(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    written = dilocox(4).to_dict()
    del written["outer"]["anomaly_scores"]
    written["outer"]["exchange"] = "auto"
    path.write_text(json.dumps(written))
    assert load_config_file(path).outer.exchange_in_use == "owner-reduce"

    del written["outer"]["exchange"]
    path.write_text(json.dumps(written))
    assert load_config_file(path).outer.exchange_in_use == "all-gather"
