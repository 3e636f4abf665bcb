"""Real recorded runs for end-to-end tests: the tiny preset trained by the real multi-process
trainer into a real ledger and object store, exactly as ``veritrain demo`` does (fewer steps)."""

from __future__ import annotations

import shutil
from pathlib import Path

from trainer.config import with_overrides
from trainer.presets import run_preset
from veritrain.record.training import train_recorded
from veritrain.settings import Settings, load_settings

RUN_ID = "e2e-run"
OUTER_STEPS = 4


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
    config = with_overrides(
        run_preset("tiny"), run_id=run_id, outer_steps=outer_steps, inner_steps=8
    )
    train_recorded(settings, config, quiet=True)
    return settings


def copy_run(settings: Settings, target: Path) -> Settings:
    """An independent copy of an embedded (SQLite + folder) run, for tampering."""
    shutil.copytree(settings.data_dir, target, symlinks=False)
    for path in target.rglob("*"):
        if path.is_file():
            path.chmod(0o600 if path.suffix == ".key" else 0o644)  # objects are stored read-only
    return load_settings(data_dir=target)
