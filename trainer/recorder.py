"""The Recorder protocol: how the trainer reports a run, step by step, to whoever records it.

The trainer knows nothing of ledgers or object stores; it calls a ``Recorder`` that the
composition root (``veritrain/``) implements with ledger + storage + attestation. Call order::

    every process:        recorder = factory(ProcessInfo(...))   # a picklable factory
    coordinator (rank 0): recorder.begin(RunStart)               # once per launch
    for each outer step t:
        every process:    digests = recorder.save_state(t, files, json_files)
                          # its OWN files only (its stage's weights, its optimiser states), so on
                          # a multi-host run each host uploads its shard and nothing gathers the
                          # model in one process; returns file name -> sha256
        coordinator:      recorder.record_outer_step(OuterStepRecord)
                          # after every process's save_state; .files holds all their digests
    coordinator:          recorder.end(RunSummary)               # after the last step
    every process:        recorder.close()                       # always, also after an error

A step's record is made only after all of its files were saved, so "step t is recorded" means
"step t can be resumed from".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import torch

from trainer.data.shards import ShardSource


@dataclass(frozen=True, kw_only=True)
class ProcessInfo:
    """Who a process is in the topology (DESIGN.md §6: rank = cluster * stages + stage)."""

    rank: int
    world_size: int
    cluster: int
    stage: int
    clusters: int
    stages: int


@dataclass(frozen=True, kw_only=True)
class RunStart:
    """What ``begin`` receives: everything the genesis and data-manifest entries need."""

    run_id: str
    config: Mapping[str, Any]
    """``TrainConfig.to_dict()``."""
    config_digest: str
    """Hex SHA-256 of the configuration's sorted-key JSON."""
    topology: Mapping[str, Any]
    model: Mapping[str, Any]
    """Model shape, parameter count and which blocks each stage holds."""
    data_manifest: Mapping[str, Any]
    """``DataManifest.to_dict()`` including the assignment rule."""
    shard_source: ShardSource
    """Where the manifest's shards can be read (to upload them)."""
    seed: int
    resumed_from_step: int | None
    """The last recorded step this launch continues from, or None for a fresh run."""


@dataclass(frozen=True, kw_only=True)
class ContributionDigest:
    cluster: int
    stage: int
    digest: str
    """Hex SHA-256 of the payload this (cluster, stage) put on the wire."""


@dataclass(frozen=True, kw_only=True)
class AnomalyFlag:
    round: int
    """The round whose exchange was flagged (one step late under the one-step delay)."""
    cluster: int
    stage: int
    reason: str
    excluded: bool


@dataclass(frozen=True, kw_only=True)
class AppliedRound:
    """One round's exchange, as applied during an outer step (the round itself when blocking,
    the previous round under the one-step delay; the last step also applies its own)."""

    round: int
    contribution_digests: Sequence[ContributionDigest]
    """Digests of every gathered payload, as each stage's outer algorithm computed them."""
    anomalies: Sequence[AnomalyFlag]
    payload_bytes: int
    """Bytes one cluster put on the wire for this round, summed over stages."""
    rank: int
    bits: int
    stats: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class DataRange:
    """What one cluster trained on in one outer step (recompute with the manifest's rule)."""

    cluster: int
    first_inner_step: int
    """Global inner step (the rule's i) of the step's first inner step."""
    inner_steps: int
    sequences: int
    tokens: int
    shards: Sequence[Sequence[int]]
    """Shard indices read, as sorted [first, last] runs."""


@dataclass(frozen=True, kw_only=True)
class OuterStepRecord:
    """What the coordinator reports at the end of outer step ``step``."""

    step: int
    inner_steps: int
    """H of this step."""
    method: str
    metrics: Mapping[str, float]
    """train_loss, eval_loss, perplexity, lr, grad_norm, tokens, step_tokens, bytes_sent,
    compute_seconds, comm_seconds, exposed_comm_seconds, wall_seconds, rank, bits, and the outer
    algorithm's norms (see docs/trainer.md)."""
    data_ranges: Sequence[DataRange]
    contribution_digests: Sequence[ContributionDigest]
    """This step's own contributions, every (cluster, stage); empty for AllReduce."""
    applied: Sequence[AppliedRound]
    anomalies: Sequence[AnomalyFlag]
    """Every anomaly of ``applied``, flattened."""
    files: Mapping[str, str]
    """Checkpoint file name -> sha256, from every process's ``save_state``."""

    @property
    def flagged_clusters(self) -> list[int]:
        return sorted({a.cluster for a in self.anomalies})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    run_id: str
    steps: int
    """Outer steps completed by the run so far (over every launch)."""
    tokens: int
    final_metrics: Mapping[str, float]
    wall_seconds: float
    """Of this launch."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Recorder(Protocol):
    def begin(self, run: RunStart) -> None:
        """Coordinator only, once per launch, before the first step."""
        ...

    def save_state(
        self,
        step: int,
        files: Mapping[str, Mapping[str, torch.Tensor]],
        json_files: Mapping[str, Mapping[str, Any]],
    ) -> Mapping[str, str]:
        """Every process: keep this process's state files for ``step``; return name -> sha256."""
        ...

    def record_outer_step(self, record: OuterStepRecord) -> None:
        """Coordinator only, after every process saved its files for ``record.step``."""
        ...

    def end(self, summary: RunSummary) -> None:
        """Coordinator only, after the last step."""
        ...

    def close(self) -> None:
        """Every process, at exit (also after an error)."""
        ...


RecorderFactory = Callable[[ProcessInfo], Recorder]
"""Builds the recorder inside each process; must be picklable (a class or a partial)."""
