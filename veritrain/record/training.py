"""``veritrain train`` on the ledger: start a recorded run, or continue one after a crash; every
cluster on this host, or one cluster of a run on several hosts (``ClusterPlacement``)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ledger.db import create_engine
from ledger.service import Ledger
from trainer.config import TrainConfig
from trainer.recorder import RunSummary
from veritrain.errors import RecorderError, SourceError
from veritrain.policy import PolicyChoice
from veritrain.record.keyring import KeyRing
from veritrain.record.placement import ClusterPlacement, train_placed
from veritrain.record.recorder import LedgerRecorderFactory, append_final
from veritrain.settings import Settings
from veritrain.sources import DirectSource
from veritrain.sources.downloads import download_checkpoint, download_data, read_data_manifest
from veritrain.sources.recorded_run import RecordedRun


def recorder_factory(
    settings: Settings,
    policy: PolicyChoice | None = None,
    *,
    cluster_keys: Path | None = None,
    placement: ClusterPlacement | None = None,
) -> LedgerRecorderFactory:
    """The recorder of a launch on this host. Each cluster keeps its keys in its own folder,
    ``<cluster_keys>/cluster-<j>`` (default ``<data dir>/cluster-keys``) -- or ``cluster_keys``
    itself for the one cluster of a placement --, never in the coordinator's
    ``VERITRAIN_KEY_DIR``, as separate hosts would."""
    explicit = (
        {placement.cluster: cluster_keys}
        if placement is not None and cluster_keys is not None
        else {}
    )
    return LedgerRecorderFactory(
        database_url=settings.database_url,
        store_url=settings.store_url,
        key_dir=settings.keys_path,
        cluster_key_root=(cluster_keys if not explicit else None)
        or settings.data_dir / "cluster-keys",
        cluster_key_dirs=explicit,
        origin=settings.origin,
        policy=policy or PolicyChoice(),
        tee_type=settings.tee_type,
        witnesses=settings.witnesses,
    )


def train_recorded(
    settings: Settings,
    config: TrainConfig,
    *,
    policy: PolicyChoice | None = None,
    cluster_keys: Path | None = None,
    placement: ClusterPlacement | None = None,
    quiet: bool = False,
) -> RunSummary | None:
    """Train ``config`` as a new run, recording every outer step in the ledger and the store
    (with ``placement``: this host's cluster of it; cluster 0 records, the others store their
    own files and signatures)."""
    factory = recorder_factory(settings, policy, cluster_keys=cluster_keys, placement=placement)
    return train_placed(
        config, factory, placement, data_dir=settings.data_dir / "corpus", quiet=quiet
    )


def resume_recorded(
    settings: Settings,
    run_id: str,
    *,
    cluster_keys: Path | None = None,
    placement: ClusterPlacement | None = None,
    quiet: bool = False,
) -> RunSummary | None:
    """Continue ``run_id`` from its last recorded outer step, with its recorded configuration,
    policy and data; the chain continues with nothing lost and nothing recorded twice. On
    several hosts only cluster 0 resumes (it reads the ledger); the others join it."""
    if placement is not None and placement.cluster != 0:
        raise RecorderError(
            f"only cluster 0 resumes run {run_id!r} (it alone "
            f"reads the ledger); cluster {placement.cluster} joins "
            f"it: veritrain train --cluster {placement.cluster} --lighthouse URL --run-id {run_id}"
        )
    try:
        source = DirectSource(settings)
    except SourceError as exc:
        raise RecorderError(f"cannot resume {run_id!r}: {exc}") from None
    with source, tempfile.TemporaryDirectory(prefix="veritrain-resume-") as folder:
        run = RecordedRun.load(source, run_id)
        recorded_tee = run.genesis.tee.type
        if recorded_tee != settings.tee_type:
            # Every step's quotes must come from the attester its genesis names (verify, check
            # 5): a resumed run that attested with another would record steps that fail it.
            raise RecorderError(
                f"cannot resume {run_id!r}: its genesis names the TEE back-end "
                f"{recorded_tee!r}, this host is set to {settings.tee_type!r}; "
                f"resume it with VERITRAIN_TEE_TYPE={recorded_tee}"
            )
        config = run.config
        policy = run.genesis.verification_policy
        last = run.last_step
        if last is not None and last + 1 >= config.outer_steps:
            if run.final_entry is not None:
                raise RecorderError(
                    f"run {run_id!r} is finished: it recorded all {config.outer_steps} outer steps"
                )
            _finish(settings, run)  # killed between its last step and run.final
            return None
        manifest = read_data_manifest(source, run.data_manifest)
        data = download_data(source, manifest, settings.data_dir / "corpus" / "recorded" / run_id)
        state = (
            download_checkpoint(source, run.step(last).checkpoint, Path(folder))
            if last is not None
            else None
        )
        choice = PolicyChoice.of(policy)
        factory = recorder_factory(settings, choice, cluster_keys=cluster_keys, placement=placement)
        return train_placed(
            config,
            factory,
            placement,
            state=state,
            data=data,
            data_dir=settings.data_dir / "corpus",
            quiet=quiet,
        )


def _finish(settings: Settings, run: RecordedRun) -> None:
    assert run.last_step is not None
    engine = create_engine(settings.database_url)
    try:
        ledger = Ledger(
            engine, origin=settings.origin, log_keys=KeyRing(settings.keys_path, settings.origin)
        )
        append_final(ledger, run.run_id, run.step(run.last_step))
    finally:
        engine.dispose()
