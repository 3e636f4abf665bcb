"""Where a launch's clusters run: every cluster on this host, or one cluster of a run on
several hosts (``ClusterPlacement``). The one place that picks ``trainer.api.train`` or
``train_cluster`` for a launch, whatever records it (the ledger or a folder)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainer.api import train, train_cluster
from trainer.checkpoint_layout import CheckpointFiles
from trainer.config import TrainConfig
from trainer.data.build import PreparedData
from trainer.recorder import RecorderFactory, RunSummary


@dataclass(frozen=True)
class ClusterPlacement:
    """This host runs one cluster of a run whose clusters meet at ``lighthouse``."""

    cluster: int
    lighthouse: str | None
    """``http://host:port`` of ``veritrain lighthouse`` (None only for a run of one cluster)."""
    advertise: str | None = None
    """This host's address as the other clusters reach it (default: the one that reaches the
    lighthouse)."""


def train_placed(
    config: TrainConfig,
    factory: RecorderFactory,
    placement: ClusterPlacement | None,
    *,
    state: CheckpointFiles | None = None,
    data: PreparedData | None = None,
    data_dir: Path | None = None,
    quiet: bool = False,
) -> RunSummary | None:
    """Train ``config`` as ``placement`` says (None: every cluster on this host), continuing
    from ``state`` (the files of the last recorded step) when given."""
    if placement is None:
        return train(config, factory, state, data=data, data_dir=data_dir, quiet=quiet)
    return train_cluster(
        config,
        factory,
        cluster=placement.cluster,
        lighthouse=placement.lighthouse,
        resume_state=state,
        data=data,
        data_dir=data_dir,
        quiet=quiet,
        advertise_host=placement.advertise,
    )
