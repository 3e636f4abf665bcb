"""Real recorded runs for end-to-end tests: the tiny preset trained by the real multi-process
trainer into a real ledger and object store, as ``veritrain demo`` does -- with fewer steps, and
evaluation and contribution scores on fewer batches (:func:`small_run_config`)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest
from built_once import built_once

from trainer.config import InnerConfig, TrainConfig, with_overrides
from trainer.presets import run_preset
from veritrain.record.training import train_recorded
from veritrain.settings import Settings, load_settings

RUN_ID = "e2e-run"
OUTER_STEPS = 4
INNER_STEPS = 8


def with_light_extras(config: TrainConfig) -> TrainConfig:
    """``config`` with its per-outer-step extras sized for tests: the held-out loss on 1 batch
    (the tiny preset: 4) and each contribution's own-data score on 1 batch (the preset: 2). In
    the 4 training processes of :func:`small_run_config`'s run those forward passes then take
    3.0 instead of 4.9 of ~25 CPU-seconds (cProfile, 2 cores), and every re-execution and
    verification of a step is lighter too; the tests read these numbers, recompute them and
    tamper with them, never judge their size."""
    return replace(config, eval_batches=1, outer=replace(config.outer, anomaly_own_batches=1))


def with_short_warm_up(config: TrainConfig) -> TrainConfig:
    """``config`` with the default inner optimiser (a peak of 3e-3 after 10 steps, β₁ 0.9) instead
    of the tiny preset's 6e-3 after 120, β₁ 0.8 (tuned for `bench comm --quick`'s 200 inner steps,
    docs/benchmarks.md). A test run of 12-16 inner steps would end inside that warm-up, at a
    seventh of the peak; tests that need such a run to learn -- its held-out loss falling by a
    nat, a 100x update measurably hurting it -- train at the short schedule."""
    return replace(config, inner=InnerConfig())


def small_run_config(run_id: str = RUN_ID, outer_steps: int = OUTER_STEPS) -> TrainConfig:
    """The tiny preset, 2 clusters x 2 stages, H = 8, :func:`with_light_extras`."""
    return with_light_extras(
        with_overrides(
            run_preset("tiny"), run_id=run_id, outer_steps=outer_steps, inner_steps=INNER_STEPS
        )
    )


def config_file(config: TrainConfig, folder: Path) -> Path:
    """``config`` written as the JSON file ``veritrain train --config`` reads, in ``folder``."""
    path = folder / f"{config.run_id}.json"
    path.write_text(json.dumps(config.to_dict()))
    return path


def record_small_run(
    data_dir: Path,
    *,
    run_id: str = RUN_ID,
    outer_steps: int = OUTER_STEPS,
    database_url: str | None = None,
    store_url: str | None = None,
    corpus_dir: Path | None = None,
) -> Settings:
    """Train and record a 2x2 tiny run; return the settings that find it."""
    overrides: dict[str, object] = {"data_dir": data_dir}
    if database_url:
        overrides["database_url"] = database_url
    if store_url:
        overrides["store_url"] = store_url
    settings = load_settings(**overrides)
    if corpus_dir is not None:  # share one built corpus between tests
        (data_dir / "corpus").parent.mkdir(parents=True, exist_ok=True)
        if not (data_dir / "corpus").exists():
            shutil.copytree(corpus_dir, data_dir / "corpus")
    train_recorded(settings, small_run_config(run_id, outer_steps), quiet=True)
    return settings


SHARED_RUN = "recorded-run"
"""The name ``built_once`` shares the session's run under (tests/e2e/conftest.py's
``recorded_run`` fixture is this run)."""


def shared_recorded_run(factory: pytest.TempPathFactory) -> Settings:
    """The session's recorded run (:func:`record_small_run` with its defaults, built once for
    every worker): read it, or copy it with :func:`copy_run` to alter it."""
    return built_once(factory, SHARED_RUN, lambda root: record_small_run(root / "veritrain-data"))


def copy_run(settings: Settings, target: Path) -> Settings:
    """An independent copy of an embedded (SQLite + folder) run, for tampering.

    Other tests read the same run at the same time, and an SQLite reader makes and removes
    ``-wal``/``-shm`` files beside the ledger while it has it open, so a plain tree copy can
    race with them. The ledger is copied through SQLite's online backup instead (a consistent
    snapshot, WAL included) and its side files are left behind.
    """
    source_dir = settings.data_dir
    shutil.copytree(
        source_dir,
        target,
        symlinks=False,
        ignore=shutil.ignore_patterns("*.db", "*.db-wal", "*.db-shm", "*.db-journal"),
    )
    for database in source_dir.rglob("*.db"):
        copy = target / database.relative_to(source_dir)
        with (
            closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as source,
            closing(sqlite3.connect(copy)) as destination,
        ):
            source.backup(destination)
    for path in target.rglob("*"):
        if path.is_file():
            path.chmod(0o600 if path.suffix == ".key" else 0o644)  # objects are stored read-only
    return load_settings(data_dir=target)
