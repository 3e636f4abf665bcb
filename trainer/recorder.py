"""The Recorder protocol: how the trainer reports a run, step by step, to whoever records it.

The trainer knows nothing of ledgers or object stores; it calls a ``Recorder`` that the
composition root (``veritrain/``) implements with ledger + storage + attestation. Call order::

    every process:        recorder = factory(ProcessInfo(...))   # a picklable factory
    every process:        keys = recorder.enrol(RunIdentity)     # a cluster's keys, or None
    coordinator (rank 0): recorder.begin(RunStart)               # once per launch, with every
                                                                 # cluster's enrolment
    for each outer step t:
        every process:    signed = recorder.publish_contribution(Publication(t, own digest,
                                                             payload bytes, own commitments))
                          # before the payload goes on the wire: keep it where every cluster
                          # (and every auditor) can fetch it, and sign its digest together
                          # with the per-inner-step commitments (records/commitments.py)
        any process:      recorder.fetch_contribution(digest)    # a payload the wire lost
        every process:    digests = recorder.save_state(t, files, json_files)
                          # its OWN files only (its stage's weights, its optimiser states), so on
                          # a multi-host run each host uploads its shard and nothing gathers the
                          # model in one process; returns file name -> sha256
        coordinator:      request = recorder.prepare_outer_step(OuterStepReport)
                          # after every process's save_state; .files holds all their digests
        every process:    evidence = recorder.attest(request)
                          # what the process signs for its own cluster, in its own process
                          # (the speaker's quote; its contribution was signed when published)
        coordinator:      recorder.record_outer_step(OuterStepReport with .evidence)
        coordinator:      recorder.recorded_checkpoint(t)        # what a joining cluster loads
    coordinator:          recorder.end(RunSummary)               # after the last step
    every process:        recorder.close()                       # always, also after an error

    a joining cluster:    recorder.load_checkpoint(ref, names)   # the recorded state it starts from

The protocol is three by concern -- ``Signer`` (enrol, publish_contribution, attest),
``StateStore`` (save_state, fetch_contribution, recorded_checkpoint, load_checkpoint) and
``RunLog`` (begin, prepare_outer_step, record_outer_step, end) -- which ``Recorder`` joins, with
``close``. What the coordinator hands over at a step is an ``OuterStepReport``: the recorder
makes the step's record (records/outer_step.py) from it.

The trainer moves the enrolments, the request and the evidence between processes (inside a cluster
over its world, between clusters over the run channel); it never sees a key. A step's record is made
only after all of its files were saved, so "step t is recorded" means "step t can be resumed from".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from records.commitments import InnerCommitments
from records.data_manifest import DataManifest
from records.genesis import ClusterKeys, ModelSummary
from records.genesis import Topology as RunTopology
from records.outer_step import (
    Anomaly,
    CheckpointRef,
    ClusterVerdict,
    ContributionRef,
    DataRange,
    Quorum,
    QuoteRef,
    StageContribution,
)
from trainer.checkpoint_layout import CheckpointFiles, FileDigests, JsonFiles, TensorFiles
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
    topology: RunTopology
    """Clusters, stages, world size, backend, device, rank rule, the clusters that start."""
    model: ModelSummary
    """Model shape, parameter count and which blocks each stage holds."""
    data_manifest: DataManifest
    """The corpus, with the run's assignment rule attached."""
    shard_source: ShardSource
    """Where the manifest's shards can be read (to upload them)."""
    seed: int
    resumed_from_step: int | None
    """The last recorded step this launch continues from, or None for a fresh run."""
    enrollments: Sequence[ClusterKeys] = ()
    """Every cluster's enrolment, made in that cluster's own process (``Recorder.enrol``)."""


@dataclass(frozen=True, kw_only=True)
class RunIdentity:
    """What a cluster's process needs to enrol its keys in a run."""

    run_id: str
    config_digest: str
    device: str = "cpu"
    """The device type the process trains on (``cpu`` or ``cuda``): the cluster enrols the
    hardware class it measures there, once the trainer's determinism settings are in force."""


@dataclass(frozen=True, kw_only=True)
class AttestationRequest:
    """What the coordinator asks of every cluster at the end of an outer step: the quote's
    freshness and binding (DESIGN.md §5), and the statements attested so far, so an
    attester that restarted can replay its register."""

    step: int
    nonce: str
    """Hex root hash of the log just before the step's entry."""
    prev_leaf: str
    """Hex leaf hash of the entry before it."""
    statement_digest: str
    """Hex SHA-256 of the step's provenance statement."""
    statements: tuple[str, ...]
    """Every outer step's statement digest, this one last."""


@dataclass(frozen=True, kw_only=True)
class ClusterEvidence:
    """What one process signed, in its own process, for one outer step."""

    cluster: int
    stage: int
    contribution: StageContribution | None
    """Its own contribution digest, signed with its cluster's contribution key."""
    quote: QuoteRef | None
    """Its cluster's quote (one process per cluster makes it)."""


ContributionDigest = ContributionRef
"""One (cluster, stage) payload by digest: the trainer reports the record's own type."""

FilePicker = Callable[[Sequence[str]], Sequence[str]]
"""Given a checkpoint's file names, the ones to load."""


@dataclass(frozen=True, kw_only=True)
class Publication:
    """What a process hands ``publish_contribution`` before its payload goes on the wire."""

    step: int
    own: ContributionDigest
    """This process's own contribution digest: ``payload`` must hash to it."""
    payload: bytes
    commitments: InnerCommitments | None = None
    """The stage's per-inner-step commitments of ``step`` (records/commitments.py), signed with
    the contribution; None where nothing is signed."""


AnomalyFlag = Anomaly
"""A flagged contribution of one round (the round is one step late under the one-step delay)."""


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
    verdicts: Sequence[ClusterVerdict] = ()
    """One per cluster, the same in every stage (``anomalies`` are the flagged ones)."""


TIMING_METRICS = frozenset(
    {"compute_seconds", "comm_seconds", "exposed_comm_seconds", "quorum_seconds", "wall_seconds"}
)
"""Metrics measured with a clock: they differ between executions. Every other metric of an
outer step is computed from the run's data and state, so a bitwise re-execution reproduces it
exactly."""


@dataclass(frozen=True, kw_only=True)
class OuterStepReport:
    """What the coordinator reports at the end of outer step ``step``."""

    step: int
    inner_steps: int
    """H of this step."""
    method: str
    metrics: Mapping[str, float]
    """train_loss, eval_loss, perplexity, lr, grad_norm, tokens, step_tokens, bytes_sent,
    compute_seconds, comm_seconds, exposed_comm_seconds, quorum_seconds, wall_seconds, rank, bits,
    and the outer algorithm's norms (see docs/trainer.md)."""
    data_ranges: Sequence[DataRange]
    contribution_digests: Sequence[ContributionDigest]
    """This step's own contributions, every (cluster, stage); empty for AllReduce."""
    applied: Sequence[AppliedRound]
    anomalies: Sequence[AnomalyFlag]
    """Every anomaly of ``applied``, flattened."""
    files: Mapping[str, str]
    """Checkpoint file name -> sha256, from every process's ``save_state``."""
    quorum: Quorum
    """The clusters that contributed to the step, and what changed since the step before."""
    evidence: Sequence[ClusterEvidence] = ()
    """Every contribution's signature (``publish_contribution``) and every cluster's quote
    (``attest``)."""
    gone: tuple[int, ...] = ()
    """Contributors that stopped beating before they quoted (they left the run during the
    step): the step is recorded without their quotes."""
    commitments: Sequence[InnerCommitments] = ()
    """When re-executing a step: every (cluster, stage)'s per-inner-step commitments, in that
    order, for reproduce to compare with the signed ones. Empty in a training run, where each
    process hands its own to ``Recorder.publish_contribution``, which stores and signs them
    and the entry names them (they stay off the link between clusters)."""

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


class Signer(Protocol):
    """Signing: what each process signs for its own cluster, in its own process, with keys the
    trainer never sees."""

    def enrol(self, run: RunIdentity) -> ClusterKeys | None:
        """Every process, once per launch: the process that speaks for its cluster returns the
        cluster's enrolled keys; the others None."""
        ...

    def publish_contribution(self, published: Publication) -> StageContribution | None:
        """Every process, before its payload goes on the wire: keep ``published.payload`` where
        every cluster can fetch it by digest, and sign its digest and the stage's per-inner-step
        commitments with the cluster's key (None: this recorder keeps and signs nothing)."""
        ...

    def attest(self, request: AttestationRequest) -> ClusterEvidence | None:
        """Every process: the process that speaks for its cluster quotes ``request``; the others
        answer None (their contributions were signed when published)."""
        ...


class StateStore(Protocol):
    """State storage: each process's own files of a step, and what another cluster fetches
    back (a payload the wire lost, a recorded checkpoint to start from)."""

    def save_state(self, step: int, files: TensorFiles, json_files: JsonFiles) -> FileDigests:
        """Every process: keep this process's state files for ``step``; return name -> sha256."""
        ...

    def fetch_contribution(self, digest: str) -> bytes | None:
        """A payload some process published (None: this recorder keeps none)."""
        ...

    def recorded_checkpoint(self, step: int) -> CheckpointRef | None:
        """Coordinator only: the checkpoint recorded for ``step`` (None: not loadable
        elsewhere)."""
        ...

    def load_checkpoint(
        self, checkpoint: CheckpointRef, names: FilePicker
    ) -> CheckpointFiles | None:
        """A joining cluster's process: the files of a recorded checkpoint that ``names``
        picks from its file names, each verified against the recorded digests (None: this
        recorder cannot load recorded state)."""
        ...


class RunLog(Protocol):
    """The run log, written by the coordinator alone: the run's beginning, each outer step
    (prepared, attested, then recorded) and its end."""

    def begin(self, run: RunStart) -> None:
        """Coordinator only, once per launch, before the first step."""
        ...

    def prepare_outer_step(self, report: OuterStepReport) -> AttestationRequest | None:
        """Coordinator only, after every process saved its files for ``report.step``: store
        what the entry will name and say what the clusters must attest (None: nothing)."""
        ...

    def record_outer_step(self, report: OuterStepReport) -> None:
        """Coordinator only: append the step, with every process's ``report.evidence``."""
        ...

    def end(self, summary: RunSummary) -> None:
        """Coordinator only, after the last step."""
        ...


class Recorder(Signer, StateStore, RunLog, Protocol):
    """Everything the trainer reports to, in one object per process (the call order is in the
    module docstring)."""

    def close(self) -> None:
        """Every process, at exit (also after an error)."""
        ...


class SignsNothing:
    """The signing (``Signer``), the sharing (``StateStore`` but ``save_state``) and the
    attestation request of a recorder that signs and shares nothing (plain files, memory,
    benchmarks): no keys, no request, no evidence, no payloads or checkpoints kept for other
    clusters."""

    def publish_contribution(self, published: Publication) -> StageContribution | None:
        return None

    def fetch_contribution(self, digest: str) -> bytes | None:
        return None

    def recorded_checkpoint(self, step: int) -> CheckpointRef | None:
        return None

    def load_checkpoint(
        self, checkpoint: CheckpointRef, names: FilePicker
    ) -> CheckpointFiles | None:
        return None

    def enrol(self, run: RunIdentity) -> ClusterKeys | None:
        return None

    def prepare_outer_step(self, report: OuterStepReport) -> AttestationRequest | None:
        return None

    def attest(self, request: AttestationRequest) -> ClusterEvidence | None:
        return None


RecorderFactory = Callable[[ProcessInfo], Recorder]
"""Builds the recorder inside each process; must be picklable (a class or a partial)."""
