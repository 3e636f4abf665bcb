"""The shrunk ``veritrain bench poison`` set-up the poison tests share (one module per test
file, so that pytest-xdist runs the files' simulations side by side): 4 clusters of the tiny
preset in one process (veritrain/bench/poison_run.py), the attack active from round 2."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from trainer.api import assignment_rule
from trainer.config import TrainConfig
from trainer.data.build import prepare_data
from trainer.data.reader import BatchReader
from veritrain.bench.poison import PoisonBenchConfig
from veritrain.bench.poison_run import PoisonRun, RunOutcome, Scenario, attacked_rounds, simulate

ATTACKER = 3
ROUNDS = 4

Setup = tuple[TrainConfig, BatchReader]


def poison_setup(folder: Path) -> Setup:
    """The bench's configuration, shrunk: a 2-layer, 32-wide model, 4 rounds of 8 inner steps."""
    config = PoisonBenchConfig(outer_steps=ROUNDS, inner_steps=8).run_config(seed=0)
    small = replace(config.model, num_hidden_layers=2, hidden_size=32, intermediate_size=96)
    config = replace(config, model=small)
    prepared = prepare_data(config.data, folder)
    return config, BatchReader(
        prepared.manifest, assignment_rule(config, prepared.manifest), prepared.source
    )


def simulate_attack(setup: Setup, scenario: Scenario | None) -> tuple[PoisonRun, RunOutcome]:
    config, reader = setup
    attack = PoisonRun(config=config, scenario=scenario, attacker=ATTACKER)
    return attack, simulate(attack, reader)


def assert_caught_in_every_active_round(setup: Setup, scenario: Scenario, rule: str) -> None:
    """The attack is flagged by ``rule`` and excluded in every round it is active, and nothing
    else is flagged: not the honest clusters, not the attacker before it attacks."""
    attack, outcome = simulate_attack(setup, scenario)
    for t in range(ROUNDS):
        verdicts = outcome.verdicts[t]
        honest = [v.flags for v in verdicts if v.cluster != ATTACKER]
        assert honest == [(), (), ()], f"round {t}: honest clusters flagged {honest}"
        mine = verdicts[ATTACKER]
        if t in attacked_rounds(attack):
            assert rule in mine.flags and mine.excluded, f"round {t}: {mine}"
        else:
            assert mine.flags == (), f"round {t}, before the attack: {mine}"
