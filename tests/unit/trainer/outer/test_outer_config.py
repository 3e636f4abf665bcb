"""OuterConfig validation names the offending field."""

from __future__ import annotations

import dataclasses

import pytest

from trainer.errors import ConfigError
from trainer.outer import OuterConfig


def test_defaults_are_the_diloco_paper_values():
    config = OuterConfig()
    assert (config.kind, config.lr, config.momentum, config.nesterov) == ("diloco", 0.7, 0.9, True)
    assert not config.overlapped and not config.compressed


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"kind": "adam"}, "OuterConfig.kind"),
        ({"outer_lr": 0.0}, "OuterConfig.outer_lr"),
        ({"outer_momentum": 1.0}, "OuterConfig.outer_momentum"),
        ({"bits": 6}, "OuterConfig.bits"),
        ({"bits": 1}, "OuterConfig.bits"),
        ({"dense_bits": 4}, "OuterConfig.dense_bits"),
        ({"quant_block": 7}, "OuterConfig.quant_block"),
        ({"min_rank": 8, "max_rank": 4, "rank": 4}, "OuterConfig.max_rank"),
        ({"rank": 100}, "OuterConfig.rank"),
        ({"rank_energy": 1.5}, "OuterConfig.rank_energy"),
        ({"anomaly_norm_ratio": 1.0}, "OuterConfig.anomaly_norm_ratio"),
        ({"min_inner_steps": 20, "max_inner_steps": 10}, "OuterConfig.max_inner_steps"),
    ],
)
def test_invalid_field_is_named(overrides, field):
    with pytest.raises(ConfigError, match=field):
        OuterConfig(**overrides)


def test_to_dict_is_json_able():
    import json

    assert json.loads(json.dumps(OuterConfig(kind="dilocox").to_dict()))["kind"] == "dilocox"


def test_outer_step_defaults_depend_on_the_overlap_and_are_recorded():
    assert (OuterConfig(kind="dilocox").lr, OuterConfig(kind="dilocox").momentum) == (0.5, 0.8)
    blocking = OuterConfig(kind="dilocox", overlap=False)
    assert (blocking.lr, blocking.momentum) == (0.7, 0.9)
    assert blocking.to_dict()["outer_lr"] == 0.7
    # Switching the kind of a default config switches to that kind's defaults.
    assert dataclasses.replace(OuterConfig(), kind="dilocox").lr == 0.5
    explicit = OuterConfig(kind="dilocox", outer_lr=0.6, outer_momentum=0.7)
    assert explicit.to_dict()["outer_lr"] == 0.6 and explicit.momentum == 0.7
    assert OuterConfig(**explicit.to_dict()) == explicit


def test_configs_are_equal_when_they_run_the_same_algorithm():
    assert OuterConfig(kind="dilocox") == OuterConfig(
        kind="dilocox", outer_lr=0.5, outer_momentum=0.8
    )
    assert OuterConfig(kind="dilocox") != OuterConfig(kind="dilocox", overlap=False)
    assert len({OuterConfig(), OuterConfig(outer_lr=0.7)}) == 1


@pytest.mark.parametrize("rank", [4, 28, 100])
def test_with_rank_admits_a_rank_outside_the_adaptive_bounds(rank):
    config = OuterConfig(kind="dilocox").with_rank(rank)
    assert config.rank == rank and config.min_rank <= rank <= config.max_rank
    assert OuterConfig(kind="dilocox").with_rank(28) == OuterConfig(
        kind="dilocox"
    )  # in bounds: unchanged
    with pytest.raises(ConfigError, match=r"OuterConfig\.rank"):
        OuterConfig(kind="dilocox").with_rank(0)
