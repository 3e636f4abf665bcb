"""Run configuration: JSON/TOML round trips, validation that names the field, CLI overrides."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from trainer.config import (
    InnerConfig,
    PoisonForTesting,
    TrainConfig,
    load_config_file,
    with_overrides,
)
from trainer.errors import ConfigError
from trainer.presets import run_preset
from trainer.runtime.inner import learning_rate


def test_config_round_trips_through_json() -> None:
    config = with_overrides(run_preset("tiny"), method="allreduce", seed=5, data_paths=("a.txt",))
    again = TrainConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    assert again.digest_text() == config.digest_text()


def test_toml_file_sets_nested_fields_and_outer_kind_follows_method(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text(
        'method = "dilocox"\nclusters = 3\n[model]\nnum_hidden_layers '
        "= 2\nhidden_size = 32\n[outer]\nrank = 4\nmin_rank = 2\n"
    )
    config = load_config_file(path)
    assert (config.clusters, config.model.num_hidden_layers, config.outer.rank) == (3, 2, 4)
    assert config.outer.kind == "dilocox"


def test_unknown_field_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="inner_stepz"):
        TrainConfig.from_dict({"inner_stepz": 3})
    with pytest.raises(ConfigError, match=r"TrainConfig.model has unknown field\(s\) layers"):
        TrainConfig.from_dict({"model": {"layers": 3}})


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"clusters": 0}, "clusters"),
        ({"micro_batches": 1, "stages": 2}, "micro_batches"),
        ({"method": "fedavg"}, "method"),
        ({"run_id": "a/b"}, "run_id"),
        ({"stages": 9}, "pipeline stages"),
    ],
)
def test_invalid_values_name_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        TrainConfig.from_dict(changes)


def test_outer_kind_must_match_the_method() -> None:
    config = run_preset("tiny")
    with pytest.raises(ConfigError, match=r"outer\.kind must equal method"):
        TrainConfig.from_dict(
            {**config.to_dict(), "method": "dilocox", "outer": {"kind": "diloco"}}
        )


def test_poison_must_fit_the_run() -> None:
    with pytest.raises(ConfigError, match="poison_for_testing"):
        TrainConfig(
            clusters=2, outer_steps=3, poison_for_testing=PoisonForTesting(cluster=2, step=1)
        )
    with pytest.raises(ConfigError, match="'allreduce'"):
        TrainConfig(method="allreduce", poison_for_testing=PoisonForTesting(cluster=0, step=0))


def test_method_override_switches_the_outer_algorithm() -> None:
    config = with_overrides(run_preset("tiny"), method="allreduce", clusters=3, outer_steps=2)
    assert (config.method, config.clusters, config.outer_steps) == ("allreduce", 3, 2)
    assert with_overrides(config, method="diloco").outer.kind == "diloco"
    with pytest.raises(ConfigError, match="method must be one of"):
        with_overrides(config, method="sgd")


def test_learning_rate_warms_up_linearly_then_decays_to_the_floor() -> None:
    inner = InnerConfig(lr=1.0, warmup_steps=4, min_lr_ratio=0.1)
    assert [learning_rate(inner, s, 20) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert learning_rate(inner, 4, 20) == pytest.approx(1.0)
    assert learning_rate(inner, 12, 20) == pytest.approx(0.55)  # halfway down the cosine
    assert learning_rate(inner, 20, 20) == pytest.approx(0.1)
    assert learning_rate(inner, 50, 20) == pytest.approx(0.1)  # adaptive H may run past the plan


def test_a_recorded_configuration_that_names_no_verdict_rule_is_judged_by_v1() -> None:
    recorded = run_preset("tiny").to_dict()
    del recorded["outer"]["anomaly_rule"]  # a genesis written before the rules had versions
    config = TrainConfig.from_dict(recorded)
    assert config.outer.anomaly_rule == "veritrain.verdict/v1"
    assert config.to_dict() == recorded  # reads back as itself: check 10 passes


def test_a_new_run_records_the_current_verdict_rule(tmp_path: Path) -> None:
    assert run_preset("tiny").to_dict()["outer"]["anomaly_rule"] == "veritrain.verdict/v2"
    path = tmp_path / "run.toml"
    path.write_text('method = "diloco"\n')
    assert load_config_file(path).outer.anomaly_rule == "veritrain.verdict/v2"
    path.write_text('method = "diloco"\n[outer]\nanomaly_rule = "veritrain.verdict/v1"\n')
    assert load_config_file(path).outer.anomaly_rule == "veritrain.verdict/v1"


def _rounds(outer_steps: int, inner_steps: int, warmup_steps: int) -> tuple[int, ...]:
    config = replace(
        with_overrides(run_preset("tiny"), outer_steps=outer_steps, inner_steps=inner_steps),
        inner=InnerConfig(warmup_steps=warmup_steps),
        warmup_round=True,
    )
    return config.round_inner_steps()


@pytest.mark.parametrize(
    ("outer_steps", "inner_steps", "warmup_steps", "rounds"),
    [
        # bench comm --quick's 8 x 25 with tiny's 120-step warm-up: capped at half the run.
        (8, 25, 120, (100, 15, 15, 14, 14, 14, 14, 14)),
        (40, 25, 120, (120, *([23] * 22), *([22] * 17))),  # the full schedule: the warm-up
        (3, 4, 10, (6, 3, 3)),
        (4, 1, 10, (1, 1, 1, 1)),  # every other round keeps one step
        (1, 20, 10, (20,)),  # one round has nothing to share
        (5, 20, 0, (20,) * 5),  # no warm-up, no warm-up round
    ],
)
def test_the_warmup_round_keeps_the_token_budget(
    outer_steps: int, inner_steps: int, warmup_steps: int, rounds: tuple[int, ...]
) -> None:
    assert _rounds(outer_steps, inner_steps, warmup_steps) == rounds
    assert sum(rounds) == outer_steps * inner_steps


def test_the_warmup_round_is_recorded_only_when_set_and_excludes_adaptive_h() -> None:
    equal = replace(run_preset("tiny"), warmup_round=False)
    assert "warmup_round" not in equal.to_dict()  # earlier runs' configurations and digests
    assert [equal.inner_steps_of(s) for s in range(equal.outer_steps)] == [20] * 6
    planned = run_preset("tiny")  # 6 x 20 with a 120-step warm-up: 60, then 12 x 5
    assert planned.to_dict()["warmup_round"] is True
    assert [planned.inner_steps_of(s) for s in range(6)] == [60, 12, 12, 12, 12, 12]
    assert planned.inner_steps_of(6) == planned.inner_steps_of(-1) == 20  # no plan: H
    again = TrainConfig.from_dict(json.loads(json.dumps(planned.to_dict())))
    assert again == planned and again.inner_steps_of(0) == 60
    with pytest.raises(ConfigError, match="warmup_round plans every round's H"):
        replace(planned, outer=replace(planned.outer, adaptive_inner_steps=True))
