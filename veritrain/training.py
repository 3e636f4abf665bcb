"""``veritrain train`` on the ledger: start a recorded run, or continue one after a crash."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path

from ledger.db import create_engine, sqlite_file_missing
from ledger.envelope import KIND_FINAL
from ledger.service import Ledger
from storage import open_store
from trainer.api import train
from trainer.config import TrainConfig
from trainer.recorder import RunSummary
from veritrain.genesis import VerificationPolicy
from veritrain.keyring import KeyRing
from veritrain.recorded_run import RecordedRun, download_state, load_recorded_run, recorded_data
from veritrain.recorder import FINAL_SCHEMA, LedgerRecorderFactory, RecorderError
from veritrain.settings import Settings


def recorder_factory(settings: Settings, policy: VerificationPolicy | None = None) -> LedgerRecorderFactory:
    return LedgerRecorderFactory(
        database_url=settings.database_url,
        store_url=settings.store_url,
        key_dir=settings.keys_path,
        origin=settings.origin,
        policy=policy or VerificationPolicy(),
    )


def default_run_id() -> str:
    return "run-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


def train_recorded(settings: Settings, config: TrainConfig, *, quiet: bool = False) -> RunSummary | None:
    """Train ``config`` as a new run, recording every outer step in the ledger and the store."""
    return train(config, recorder_factory(settings), data_dir=settings.data_dir / "corpus", quiet=quiet)


def resume_recorded(settings: Settings, run_id: str, *, quiet: bool = False) -> RunSummary | None:
    """Continue ``run_id`` from its last recorded outer step, with its recorded configuration
    and data; the chain continues with nothing lost and nothing recorded twice."""
    if sqlite_file_missing(settings.database_url):
        raise RecorderError(f"cannot resume {run_id!r}: there is no ledger at {settings.database_url}")
    engine = create_engine(settings.database_url)
    try:
        run = load_recorded_run(Ledger(engine), run_id)
    finally:
        engine.dispose()
    config = run.config
    last = run.last_step
    with open_store(settings.store_url) as store, tempfile.TemporaryDirectory(prefix="veritrain-resume-") as folder:
        data = recorded_data(store, run, settings.data_dir / "corpus" / "recorded" / run_id)
        state = download_state(store, run.step(last), Path(folder)) if last is not None else None
        if last is not None and last + 1 >= config.outer_steps:
            if any(e.kind == KIND_FINAL for e in run.entries):
                raise RecorderError(f"run {run_id!r} is finished: it recorded all {config.outer_steps} outer steps")
            _finish(settings, run)  # killed between its last step and run.final
            return None
        return train(config, recorder_factory(settings), state, data=data, quiet=quiet)


def _finish(settings: Settings, run: RecordedRun) -> None:
    last = run.step(run.last_step or 0)
    engine = create_engine(settings.database_url)
    try:
        ledger = Ledger(engine, origin=settings.origin, log_keys=KeyRing(settings.keys_path, settings.origin))
        ledger.append(
            run.run_id,
            KIND_FINAL,
            {
                "schema": FINAL_SCHEMA,
                "steps": int(last["step"]) + 1,
                "tokens": int(last["tokens"]["total"]),
                "final_metrics": last["metrics"],
                "last_checkpoint": {"manifest_root": last["checkpoint"]["manifest_root"]},
            },
        )
    finally:
        engine.dispose()
