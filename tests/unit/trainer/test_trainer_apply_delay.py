"""Where the short overlap (``OuterConfig.apply_delay``) is in use, and what the genesis records:
the delay the run applies, not a setting it ignores (a blocking run, DiLoCo, data-parallel
replicas), so verify and reproduce rebuild the algorithm the run had."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainer.config import with_overrides
from trainer.errors import ConfigError
from trainer.outer import OuterConfig
from trainer.presets import run_preset


def test_the_tiny_presets_dilocox_applies_three_steps_into_the_next_round() -> None:
    config = with_overrides(run_preset("tiny"), method="dilocox")
    assert config.outer.delay_in_use == 3 and not config.outer.look_ahead
    assert config.to_dict()["outer"]["apply_delay"] == 3


@pytest.mark.parametrize(
    "change",
    [
        {"method": "diloco"},
        {"method": "dilocox", "data_parallel": 2},
    ],
)
def test_a_run_that_cannot_use_the_delay_records_none(change: dict[str, object]) -> None:
    config = with_overrides(run_preset("tiny"), **change)  # type: ignore[arg-type]
    assert config.outer.delay_in_use is None
    assert "apply_delay" not in config.to_dict()["outer"]


def test_a_blocking_run_ignores_it_and_a_delay_of_zero_is_refused() -> None:
    blocking = OuterConfig(kind="dilocox", overlap=False, apply_delay=3)
    assert blocking.delay_in_use is None and not blocking.look_ahead
    assert "apply_delay" not in blocking.to_dict()
    with pytest.raises(ConfigError, match="apply_delay must be >= 1"):
        OuterConfig(kind="dilocox", apply_delay=0)
    one_step = replace(OuterConfig(kind="dilocox"), apply_delay=None)
    assert one_step.look_ahead and one_step.delay_in_use is None
