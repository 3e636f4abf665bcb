"""One training process: its stage of one cluster (one of the stage's D data-parallel replicas,
data_parallel.py), from start (or a saved step) to the end.

Each cluster is its own ``torch.distributed`` world; clusters meet only in torchft's quorums
(membership.py) and on the run channel (channel.py). Per outer step t (H inner steps), in
every process:

1. H inner steps through the pipeline (trainer/runtime/pipeline.py, inner.py); the AllReduce
   baseline all-reduces gradients over the stage's quorum group inside each of them;
2. the cluster's numbers of the round (training loss, gradient norm, timings) are gathered
   over the cluster's world, so each of its processes holds the same;
3. DiLoCo / DiLoCoX (outer_sync.py): ``contribution(t)`` -> the payload is kept and signed and
   its header posted -> quorum -> all-gather over the stage's quorum group -> ``apply`` in the
   order of trainer/outer/protocol.py. After every apply the tied embedding's copy on the last
   stage is overwritten with stage 0's (the last stage's outer algorithm does not own it). A
   quorum for a later round means this cluster fell behind: it listens to that round's
   exchange, loads the state recorded after it and goes on from there (``_catch_up``);
4. cluster 0 evaluates the held-out batches;
5. adaptive H (when enabled) picks the next round's H from the contributors' headers;
6. every process hands its own files to ``recorder.save_state`` (the coordinator's include
   trainer_state.json and the model-repo files); each cluster's stage 0 gathers its processes'
   reports and posts them on the channel; the coordinator (cluster 0, stage 0) builds the
   record from the round's headers and the reports, asks every contributor to quote, collects
   the quotes and calls ``recorder.record_outer_step``. A contributor that stopped beating is
   not waited for: the step is recorded without its files and quote (docs/records.md).

Modes: ``train`` (a run, its resumption, or one cluster of it), ``reexecute`` (one recorded step
again, with the clusters that took part in it, no begin/end), ``contribute`` (one cluster alone,
up to its contribution: no exchange, no eval, no saved files).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist

from records.commitments import InnerCommitments
from records.genesis import ClusterKeys
from records.outer_step import CheckpointRef, Quorum, StageContribution
from trainer.checkpoint import (
    TRAINER_STATE,
    CheckpointFiles,
    exchange_file,
    exchange_tensors,
    inner_file,
    load_checkpoint_directory,
    model_file,
    outer_file,
)
from trainer.config import TrainConfig
from trainer.data.assignment import AssignmentRule
from trainer.data.manifest import DataManifest
from trainer.data.reader import BatchReader
from trainer.data.shards import ShardSource
from trainer.errors import CheckpointError, ConfigError, DataError, WorkerError
from trainer.hf_repo import TokenizerExport, repo_json_files
from trainer.model import TIED_HEAD, build_stage, stage_layout
from trainer.outer import build_outer_algorithm, next_inner_steps
from trainer.outer.protocol import Contribution, OuterAlgorithm
from trainer.precision import parameter_dtype
from trainer.recorder import (
    ClusterEvidence,
    ContributionDigest,
    ProcessInfo,
    RecorderFactory,
    RunIdentity,
    RunStart,
    RunSummary,
)
from trainer.runtime.channel import ChannelError, Heartbeat, Liveness, RunChannel
from trainer.runtime.collectives import broadcast_tensors, gather_floats, ordered_sum
from trainer.runtime.commitments import StageCommitments
from trainer.runtime.data_parallel import average_gradients, broadcast_from_first, replica_rows
from trainer.runtime.determinism import make_deterministic, pick_device
from trainer.runtime.exchange import (
    ClusterNumbers,
    ContributionHeader,
    ExchangeShard,
    shard_length,
)
from trainer.runtime.forgery import Forgery
from trainer.runtime.inner import InnerOptimizer, InnerStepStats
from trainer.runtime.launch import Links, init_cluster_world, torchrun_rank
from trainer.runtime.lighthouse import SETTINGS_KEY, LighthouseSettings
from trainer.runtime.membership import (
    LoneMembership,
    MembershipSettings,
    RoundQuorum,
    TorchftMembership,
    header_key,
    post_header,
)
from trainer.runtime.messages import (
    checkpoint_from,
    checkpoint_message,
    evidence_from,
    evidence_message,
    keys_from,
    keys_message,
    report_from,
    report_message,
    request_from,
    request_message,
)
from trainer.runtime.outer_sync import OuterSync, StepExchange
from trainer.runtime.owner_exchange import Exchange
from trainer.runtime.pipeline import PipelineRunner
from trainer.runtime.pipeline_judge import PipelineJudge
from trainer.runtime.poison import poison_local
from trainer.runtime.progress import ConsoleProgress, Progress, SilentProgress
from trainer.runtime.report import RankReport, build_record
from trainer.runtime.state import (
    Cursor,
    pending_payloads,
    read_cursor,
    restore_stage,
    share_owner,
    stage_files,
    state_owner,
    trainer_state_document,
)
from trainer.runtime.topology import Topology, create_groups

Mode = Literal["train", "reexecute", "contribute"]
START_TIMEOUT = timedelta(minutes=10)
"""How long a cluster waits for the others to start (enrolments, the coordinator's begin)."""
CONNECT_TIMEOUT = timedelta(seconds=60)


@dataclass(frozen=True, kw_only=True)
class WorkerSpec:
    """Everything a process needs; picklable (it crosses the spawn boundary)."""

    config: TrainConfig
    config_digest: str
    manifest: DataManifest
    rule: AssignmentRule
    shards: ShardSource
    recorder_factory: RecorderFactory
    topology: Topology
    links: Links
    resume: tuple[CheckpointFiles | Path, ...] | None
    """Per process of the launch: the files of the step to continue from, in memory (torchrun:
    this process) or in a folder (spawned processes); None: start from the seed."""
    stop_step: int
    """Exclusive: the process stops before this outer step."""
    mode: Mode
    quiet: bool
    tokenizer: TokenizerExport = field(default_factory=TokenizerExport)
    """The tokenizer files and special ids every checkpoint carries (trainer/hf_repo.py)."""
    payloads: Mapping[str, bytes] = field(default_factory=dict)
    """Payloads by digest that a re-execution may need and that no process of it sends (those
    of clusters that are not re-executed)."""
    forgery: Forgery | None = None
    """TESTS AND BENCHMARKS ONLY (trainer/runtime/forgery.py): a cluster that cheats unrecorded."""


def spawned_entry(index: int, spec: WorkerSpec, results: Any) -> None:
    """Entry point of a spawned process; the coordinator puts the run summary in ``results``."""
    cluster, stage, replica = spec.topology.place_replica(index)
    summary = run_process(
        index,
        spec,
        # a cluster's rank picks its GPU: clusters on one host share the host's GPUs
        local_rank=spec.topology.cluster_rank(stage, replica),
        store=spec.links.stores[cluster],
    )
    if summary is not None:
        results.put(summary)


def torchrun_entry(spec: WorkerSpec) -> RunSummary | None:
    rank, local_rank = torchrun_rank(spec.topology.stages, spec.topology.data_parallel)
    return run_process(rank, spec, local_rank=local_rank, store=None)


def run_process(
    index: int, spec: WorkerSpec, *, local_rank: int, store: tuple[str, int] | None
) -> RunSummary | None:
    topology = spec.topology
    cluster, stage, replica = topology.place_replica(index)
    device = pick_device(spec.config.device, local_rank)
    make_deterministic(
        spec.config.seed,
        topology.global_rank(cluster, stage, replica),
        device,
        threads=spec.config.threads,
    )
    backend = "nccl" if device.type == "cuda" else "gloo"
    init_cluster_world(backend, topology.cluster_rank(stage, replica), topology.per_cluster, store)
    try:
        return _Process(index, spec, device).run()
    finally:
        dist.destroy_process_group()


class _Process:
    def __init__(self, index: int, spec: WorkerSpec, device: torch.device) -> None:
        config = spec.config
        self.index, self.spec, self.config, self.device = index, spec, config, device
        self.topology = spec.topology
        self.cluster, self.stage, self.replica = self.topology.place_replica(index)
        self.stages = config.stages
        self.replicas = config.data_parallel
        self.follower = self.replica > 0
        """A data-parallel replica other than the first: it trains its rows of every batch and
        takes the outer step's result from replica 0, which alone exchanges, records and saves
        (data_parallel.py)."""
        self.coordinating = (
            self.stage == 0
            and not self.follower
            and (self.cluster == 0 or spec.mode == "contribute")
        )
        """Cluster 0's stage 0 records the run (one cluster re-executed alone: its stage 0)."""
        self.info = ProcessInfo(
            rank=self.topology.global_rank(self.cluster, self.stage, self.replica),
            world_size=config.world_size,
            cluster=self.cluster,
            stage=self.stage,
            clusters=config.clusters,
            stages=config.stages,
        )
        self._check_same_data()
        tied = config.model.tie_word_embeddings
        self.groups = create_groups(
            self.stages,
            self.stage,
            tied_embeddings=tied,
            data_parallel=self.replicas,
            replica=self.replica,
        )
        self.module = build_stage(
            config.model,
            stage=self.stage,
            n_stages=self.stages,
            seed=config.seed,
            activation_checkpointing=config.activation_checkpointing,
        ).to(device, dtype=parameter_dtype(config.precision))
        self.runner = PipelineRunner(
            self.module,
            stage=self.stage,
            stages=self.stages,
            group=self.groups.pipeline,
            device=device,
            schedule=config.schedule,
            micro_batches=config.micro_batches,
            precision=config.precision,
        )
        self.inner = InnerOptimizer(
            self.module,
            config.inner,
            planned_steps=config.planned_inner_steps,
            pipeline=self.groups.pipeline,
            embedding=self.groups.embedding,
            device=device,
        )
        # The last stage's copy of a tied embedding is not the outer algorithm's to update:
        # stage 0 owns the matrix and the copy follows it (see _sync_tied_copy).
        outer_named = [
            (name, p)
            for name, p in self.module.named_parameters()
            if not (self.module.holds_tied_copy and name == TIED_HEAD)
        ]
        self.outer_names = [name for name, _ in outer_named]
        self.outer_params = [p for _, p in outer_named]
        # Per-inner-step commitments of the parameters the outer algorithm owns, signed with
        # the contribution (trainer/runtime/commitments.py); AllReduce contributes nothing.
        self.commitments = (
            StageCommitments(
                outer_named, run_id=config.run_id, cluster=self.cluster, stage=self.stage
            )
            if config.method != "allreduce" and not self.follower
            else None
        )
        self.reader = BatchReader(spec.manifest, spec.rule, spec.shards)
        self.outer: OuterAlgorithm | None = None
        if config.method != "allreduce":
            self.outer = build_outer_algorithm(
                config.outer,
                named_params=[(name, p.detach()) for name, p in outer_named],
                cluster=self.cluster,
                n_clusters=config.clusters,
                seed=config.seed,
                judge=PipelineJudge(  # the cluster's stages reach one verdict together
                    config.outer,
                    params=self.outer_params,
                    sync_tied=self._sync_tied_copy,
                    runner=self.runner,
                    reader=self.reader,
                    group=self.groups.pipeline,
                    # its rank in the cluster's world (replica d's stages are d*S .. d*S+S-1)
                    last_stage_rank=self.topology.cluster_rank(self.stages - 1, self.replica),
                    device=device,
                ),
            )
        self.eval_batches = (
            self.reader.eval_batches(config.eval_batches)
            if self.cluster == 0 and not self.follower and spec.mode != "contribute"
            else []
        )
        self.recorder = spec.recorder_factory(self.info)
        self.repo_files = repo_json_files(config.model, spec.tokenizer) if self.coordinating else {}
        self.channel = RunChannel(
            spec.links.channel, config.run_id, connect_timeout=CONNECT_TIMEOUT
        )
        self.settings = self._lighthouse_settings()
        self.heartbeat = (
            Heartbeat(self.channel, self.cluster) if self.stage == 0 and not self.follower else None
        )
        self.alive = Liveness(self.channel, self.settings.heartbeat, grace=START_TIMEOUT)
        self.membership: TorchftMembership | LoneMembership
        if spec.links.lighthouse is not None and spec.mode != "contribute":
            host, port = spec.links.stores[self.cluster]
            self.membership = TorchftMembership(
                cluster=self.cluster,
                stage=self.stage,
                stages=self.stages,
                settings=MembershipSettings(
                    lighthouse=spec.links.lighthouse,
                    store_host=host,
                    store_port=port,
                    advertise_host=spec.links.advertise_host,
                    exchange_timeout=self.settings.exchange,
                ),
                channel=self.channel,
                shard=(
                    ExchangeShard(index=self.replica, count=self.replicas, group=self.groups.data)
                    if self.groups.data is not None
                    else None
                ),
            )
        else:
            self.membership = LoneMembership(
                cluster=self.cluster, stage=self.stage, channel=self.channel
            )
        self.sync = (
            OuterSync(
                self.outer,
                self.outer_params,
                membership=self.membership,
                commit=self._commit if not self.follower else self._follow_commit,
                fetch=self._fetch,
                last_step=config.outer_steps - 1,
                after_apply=self._sync_tied_copy,
            )
            if self.outer is not None
            else None
        )
        self.progress: Progress = (
            ConsoleProgress(outer_steps=config.outer_steps)
            if self.coordinating and not spec.quiet and spec.mode == "train"
            else SilentProgress()
        )
        self.talkative = (
            self.stage == 0
            and not self.follower
            and not self.coordinating
            and spec.mode == "train"
            and not spec.quiet
        )
        """Another cluster's stage 0 says what its cluster does (the coordinator prints the
        steps)."""
        self.previous_clusters: tuple[int, ...] = tuple(range(config.clusters))
        """The clusters of the step before (the coordinator's joined/left)."""
        self.last_comm_seconds = 0.0

    # ------------------------------------------------------------------------------------
    def run(self) -> RunSummary | None:
        started = time.perf_counter()
        try:
            cursor = self._start()
            if self.spec.mode == "train":
                cursor = self._begin(cursor) if not self.follower else cursor
                self._check_replicas_agree(cursor)
            metrics: dict[str, float] = {}
            while cursor.next_step < self.spec.stop_step:
                cursor, metrics = self._outer_step(cursor.next_step, cursor)
            if self.spec.mode != "train" or not self.coordinating:
                return None
            summary = RunSummary(
                run_id=self.config.run_id,
                steps=cursor.next_step,
                tokens=cursor.tokens,
                final_metrics=metrics,
                wall_seconds=time.perf_counter() - started,
            )
            self.recorder.end(summary)
            self.channel.put("finished", {"steps": summary.steps})
            return summary
        finally:
            self.progress.close()
            self.recorder.close()
            if self.heartbeat is not None:
                self.heartbeat.close()
            self.membership.close()

    def _start(self) -> Cursor:
        given = self.spec.resume[self.index] if self.spec.resume is not None else None
        resume = load_checkpoint_directory(given) if isinstance(given, Path) else given
        if resume is None:
            return Cursor(
                next_step=0, inner_steps_done=0, next_inner_steps=self.config.inner_steps, tokens=0
            )
        return self._restore(resume, listened=None)

    def _restore(self, files: CheckpointFiles, *, listened: Exchange | None) -> Cursor:
        """Take this process's state from ``files`` (its share of a saved step)."""
        cursor = read_cursor(files, config_digest=self.spec.config_digest)
        restore_stage(
            files,
            module=self.module,
            inner=self.inner,
            outer=self.outer,
            cluster=share_owner(files, stage=self.stage),
            stage=self.stage,
            stages=self.stages,
        )
        self._sync_tied_copy()
        if cursor.clusters:
            self.previous_clusters = cursor.clusters
        if self.sync is not None:
            self.sync.pending = None
            if cursor.pending_round is not None and self.spec.mode != "contribute":
                if cursor.pending_mean_train_loss is None:
                    raise CheckpointError(
                        "expected the signals of pending round "
                        f"{cursor.pending_round}, they are missing"
                    )
                payloads = pending_payloads(files)
                if listened is not None and listened.round == cursor.pending_round:
                    payloads.update(listened.wait())
                self.sync.restore(
                    cursor.pending_round,
                    cursor.pending_mean_train_loss,
                    digests=cursor.pending_digests_of(self.stage),
                    payloads=payloads,
                )
        return cursor

    # -- joining the run ----------------------------------------------------------------
    def _begin(self, cursor: Cursor) -> Cursor:
        """Enrol; the coordinator begins the run, the other clusters follow it (and catch up
        if it is already under way)."""
        assert not self.follower  # the replicas of a cluster enrol once, as replica 0
        keys = self.recorder.enrol(
            RunIdentity(
                run_id=self.config.run_id,
                config_digest=self.spec.config_digest,
                device=self.device.type,
            )
        )
        if self.stage == 0:
            self.channel.put(f"enrol/{self.cluster}", {"keys": keys_message(keys)})
        if self.coordinating:
            fresh = cursor.next_step == 0
            enrollments = self._enrolments(
                range(self.config.clusters) if fresh else self.topology.present
            )
            self.recorder.begin(
                replace(self._run_start(cursor, enrollments), enrollments=enrollments)
            )
            recorded = (
                self.recorder.recorded_checkpoint(cursor.next_step - 1)
                if cursor.next_step > 0
                else None
            )
            self.channel.put(
                "begun",
                {
                    "next_step": cursor.next_step,
                    "config_digest": self.spec.config_digest,
                    "manifest": self.spec.manifest.digest(),
                    "checkpoint": checkpoint_message(recorded),
                },
            )
            return cursor
        begun = self.channel.wait(
            "begun", writer_alive=lambda: self.alive(0), what="the coordinator (cluster 0) to begin"
        )
        if begun["config_digest"] != self.spec.config_digest:
            raise ConfigError(
                f"cluster 0 trains run {self.config.run_id!r} with "
                f"configuration {str(begun['config_digest'])[:12]}, this "
                f"cluster with {self.spec.config_digest[:12]}: start "
                "it without a preset or config to take cluster 0's"
            )
        if begun["manifest"] != self.spec.manifest.digest():
            raise DataError(
                "expected the corpus cluster 0 trains on "
                f"(manifest {str(begun['manifest'])[:16]}…), got "
                f"{self.spec.manifest.digest()[:16]}… (different "
                "Python versions or data files on different hosts?)"
            )
        if self.channel.get("finished") is not None:
            raise WorkerError(
                f"run {self.config.run_id!r} has finished: there is nothing left to join"
            )
        start = int(begun["next_step"])
        if start != cursor.next_step:
            if start == 0:
                raise CheckpointError(
                    f"cluster 0 starts run {self.config.run_id!r} "
                    "afresh, but this cluster was given a saved state"
                )
            cursor = self._load_recorded(
                checkpoint_from(begun["checkpoint"], step=start - 1), start - 1, listened=None
            )
        progress = self.channel.get("progress")
        if isinstance(progress, int) and progress >= cursor.next_step:
            # The run is already past this cluster's next round: listen to the next one, then
            # load what is recorded after it.
            quorum = self.membership.quorum(cursor.next_step)
            listened = self.sync.listen(quorum) if self.sync is not None else None
            return self._catch_up(quorum, listened)
        return cursor

    def _enrolments(self, clusters: Sequence[int]) -> tuple[ClusterKeys, ...]:
        """Every listed cluster's enrolment, made in that cluster's own process and posted by it."""
        deadline = time.monotonic() + START_TIMEOUT.total_seconds()
        got: dict[int, ClusterKeys | None] = {}
        while True:
            for cluster in clusters:
                message = self.channel.get(f"enrol/{cluster}") if cluster not in got else None
                if message is not None:
                    got[cluster] = keys_from(message["keys"], cluster=cluster)
            if len(got) == len(clusters):
                return tuple(k for _, k in sorted(got.items()) if k is not None)
            if time.monotonic() > deadline:
                missing = sorted(set(clusters) - set(got))
                raise WorkerError(
                    f"cluster(s) {missing} did not enrol within {START_TIMEOUT}: start them "
                    "(veritrain train --cluster J --lighthouse "
                    "URL) so that the genesis can name their keys"
                )
            time.sleep(0.05)

    def _catch_up(self, quorum: RoundQuorum, listened: Exchange | None) -> Cursor:
        """This cluster listened to round ``quorum.round``: continue from the state recorded
        after it (docs/trainer.md, "Clusters come and go")."""
        if self.cluster == 0:
            raise WorkerError(
                "cluster 0 (the coordinator) fell behind the "
                f"quorum of round {quorum.round}: it cannot record "
                "steps it did not take part in; restart the run from its last recorded step"
            )
        self._say(
            f"the run is at round {quorum.round}: listening "
            "to it, then loading the state recorded after it"
        )
        message = self.channel.wait(
            f"recorded/{quorum.round}",
            writer_alive=lambda: self.alive(0),
            what=f"the coordinator to record step {quorum.round}",
        )
        return self._load_recorded(
            checkpoint_from(message["checkpoint"], step=quorum.round),
            quorum.round,
            listened=listened,
        )

    def _load_recorded(
        self, checkpoint: CheckpointRef | None, step: int, *, listened: Exchange | None
    ) -> Cursor:
        """Start over from the state recorded after ``step`` (own files, or the donor's)."""

        def names(available: Sequence[str]) -> list[str]:
            owner = state_owner(available, cluster=self.cluster, stages=self.stages)
            wanted = {
                TRAINER_STATE,
                model_file(self.stage, self.stages),
                inner_file(owner, self.stage),
                outer_file(owner, self.stage),
            }
            return [n for n in available if n in wanted]

        files = self.recorder.load_checkpoint(checkpoint, names) if checkpoint is not None else None
        if files is None:
            raise WorkerError(
                f"cluster {self.cluster} cannot load the state "
                f"recorded after step {step}: joining a run under way "
                "needs a recorder that keeps checkpoints "
                "every cluster can fetch (the ledger recorder)"
            )
        cursor = self._restore(files, listened=listened)
        if cursor.next_step != step + 1:
            raise CheckpointError(
                f"expected the state recorded after step {step}, "
                f"got the state after step {cursor.next_step - 1}"
            )
        owner = share_owner(files, stage=self.stage)
        self._say(
            f"loaded the state recorded after step {step} (cluster "
            f"{owner}'s); contributing from step {step + 1}"
        )
        return cursor

    # ------------------------------------------------------------------------------------
    def _outer_step(self, step: int, cursor: Cursor) -> tuple[Cursor, dict[str, float]]:
        started = time.perf_counter()
        H = cursor.next_inner_steps
        forgery = self.spec.forgery
        poison = self.config.poison_for_testing or (
            forgery.poison() if forgery is not None else None
        )
        if self.commitments is not None:
            self.commitments.begin(step)
        poisoned = poison is not None and poison.step == step and poison.cluster == self.cluster
        round_start = [p.detach().clone() for p in self.outer_params] if poisoned else []

        members: RoundQuorum | None = None
        quorum_seconds = 0.0
        if self.outer is None and self.spec.mode != "contribute":
            asked = time.perf_counter()
            members = self.membership.quorum(step)  # the AllReduce baseline needs its group now
            quorum_seconds = time.perf_counter() - asked
            self._announce(step)
        n_clusters = len(members.members) if members is not None else 1
        group = self.membership.process_group() if members is not None else None
        losses, last, compute_seconds, inner_comm, inner_bytes = self._inner_round(
            step, cursor.inner_steps_done, H, group, n_clusters
        )
        numbers = self._cluster_numbers(losses, last, compute_seconds / H)

        exchanged: StepExchange | None = None
        note_round_data = getattr(self.outer, "note_round_data", None)  # trainer/outer's have it
        if callable(note_round_data):  # what the round trains on, for its contribution scores
            note_round_data(step, first_inner_step=cursor.inner_steps_done, inner_steps=H)
        if self.sync is not None:
            hidden = forgery is not None and forgery.hidden_from_commitments
            if poisoned and poison is not None and not hidden:
                poison_local(self.outer_params, round_start, poison, seed=self.config.seed)
            if self.commitments is not None:
                self.commitments.contributed()
            if poisoned and poison is not None and hidden:  # forgery.py: ``payload_scale``
                poison_local(self.outer_params, round_start, poison, seed=self.config.seed)
            exchanged = self.sync.step(step, numbers, exchange=self.spec.mode != "contribute")
            if exchanged.listened is not None and exchanged.quorum is not None:
                if self.groups.data is not None:
                    raise WorkerError(
                        f"cluster {self.cluster} fell behind round "
                        f"{exchanged.quorum.round}: catching up is not "
                        "implemented with data_parallel > 1; "
                        "restart the run from its last recorded step"
                    )
                return self._catch_up(exchanged.quorum, exchanged.listened), {}
            if self.follower:
                return self._follow(
                    step, H, started, inner_comm, inner_bytes, compute_seconds, exchanged
                )
            if exchanged.quorum is not None:
                self._announce(step)
        else:
            post_header(self.channel, self._header(step, None, None, numbers))
        quorum = exchanged.quorum if exchanged is not None else members
        contributors = (
            quorum.contributors
            if exchanged is not None and quorum is not None
            else quorum.members
            if quorum is not None
            else (self.cluster,)
        )
        if self.spec.mode != "contribute" and 0 not in contributors:
            raise WorkerError(
                "cluster 0 (the coordinator) did not take part in "
                f"round {step}: the run cannot record without it; "
                "restart the run from its last recorded step"
            )

        eval_loss = self._evaluate() if self.eval_batches else None
        comm_seconds = inner_comm + (exchanged.comm_seconds if exchanged else 0.0)
        self.last_comm_seconds = comm_seconds
        next_H = self._next_inner_steps(H, quorum)
        pending = self.sync.pending if self.sync is not None else None
        cursor = Cursor(
            next_step=step + 1,
            inner_steps_done=cursor.inner_steps_done + H,
            next_inner_steps=next_H,
            tokens=cursor.tokens + self._step_tokens(H, len(contributors)),
            pending_round=pending.round if pending else None,
            pending_mean_train_loss=pending.signals.mean_train_loss if pending else None,
            clusters=tuple(contributors),
            pending_digests=self._pending_digests(pending) if self.coordinating else (),
        )
        if self.groups.data is not None:
            self._lead(cursor)
        files = self._save(step, cursor) if self.spec.mode != "contribute" else {}
        report = RankReport(
            commitments=self._reported_commitments(),
            cluster=self.cluster,
            stage=self.stage,
            files=files,
            updates=exchanged.updates if exchanged else [],
            eval_loss=eval_loss,
            compute_seconds=compute_seconds,
            comm_seconds=comm_seconds,
            exposed_comm_seconds=inner_comm + (exchanged.exposed_seconds if exchanged else 0.0),
            quorum_seconds=quorum_seconds + (exchanged.quorum_seconds if exchanged else 0.0),
            bytes_sent=inner_bytes + (self._exchange_bytes(exchanged) if exchanged else 0),
        )
        quorum_id = quorum.id if quorum is not None else 0
        return cursor, self._finish(
            step, H, cursor, report, quorum_id, tuple(contributors), started
        )

    def _reported_commitments(self) -> InnerCommitments | None:
        """The step's commitments for its record, when the record needs them: a re-execution's
        record is compared with the signed ones (veritrain/audit/reproduce.py). A training run's
        processes each store and sign their own with their contribution (``_commit``), and the
        entry names those objects; sending them again would put ~100 kB a step on the slow
        link for every stage (measured at tiny, 25 inner steps: 106 of a report's 111 kB)."""
        if self.commitments is None or self.spec.mode == "train":
            return None
        return self.commitments.take()

    def _lead(self, cursor: Cursor) -> None:
        """Replica 0 after its outer step: the other replicas of its stage take its parameters
        and cursor (their inner steps left them equal to replica 0's, the outer step did not)."""
        assert self.groups.data is not None
        broadcast_from_first(list(self.module.parameters()), self.groups.data)
        dist.broadcast_object_list(
            [cursor], src=dist.get_global_rank(self.groups.data, 0), group=self.groups.data
        )

    def _exchange_bytes(self, exchanged: StepExchange) -> int:
        """Bytes this process put on the wire between clusters in the round: its stage's
        payload, or with D replicas its 1/D slice of it (exchange.py, ``ExchangeShard``)."""
        length = int(exchanged.contribution.payload.numel())
        return length if self.replicas == 1 else shard_length(length, self.replicas)

    def _follow_commit(
        self, step: int, contribution: Contribution, numbers: ClusterNumbers
    ) -> ContributionHeader:
        """A replica other than 0 computed the same contribution as replica 0, which alone
        keeps, signs and posts it; wait until it has (``_commit``)."""
        if self.groups.data is not None and self.spec.mode != "contribute":
            dist.barrier(group=self.groups.data)
        return self._header(step, contribution, None, numbers)

    def _follow(
        self,
        step: int,
        H: int,
        started: float,
        inner_comm: float,
        inner_bytes: int,
        compute_seconds: float,
        exchanged: StepExchange,
    ) -> tuple[Cursor, dict[str, float]]:
        """A replica other than 0 after its outer step (the same as replica 0's: the same
        parameters, outer state and payloads): take replica 0's cursor and, as a guard, its
        parameters (``_lead``)."""
        assert self.groups.data is not None
        broadcast_from_first(list(self.module.parameters()), self.groups.data)
        got: list[Any] = [None]
        dist.broadcast_object_list(
            got, src=dist.get_global_rank(self.groups.data, 0), group=self.groups.data
        )
        cursor: Cursor = got[0]
        report = RankReport(
            commitments=None,
            cluster=self.cluster,
            stage=self.stage,
            files={},
            updates=[],
            eval_loss=None,
            compute_seconds=compute_seconds,
            comm_seconds=inner_comm + exchanged.comm_seconds,
            exposed_comm_seconds=inner_comm + exchanged.exposed_seconds,
            quorum_seconds=exchanged.quorum_seconds,
            bytes_sent=inner_bytes + self._exchange_bytes(exchanged),
        )
        return cursor, self._finish(step, H, cursor, report, 0, cursor.clusters, started)

    def _check_replicas_agree(self, cursor: Cursor) -> None:
        """Every replica of a stage starts the run at replica 0's step (a replica cannot join
        a run under way on its own)."""
        if self.groups.data is None:
            return
        got: list[Any] = [cursor.next_step]
        dist.broadcast_object_list(
            got, src=dist.get_global_rank(self.groups.data, 0), group=self.groups.data
        )
        if got[0] != cursor.next_step:
            raise WorkerError(
                f"cluster {self.cluster} replica {self.replica} "
                f"starts at step {cursor.next_step}, replica 0 at step "
                f"{got[0]}: joining a run under way is not implemented with data_parallel > 1"
            )

    def _announce(self, step: int) -> None:
        """The coordinator says which round the run has reached (clusters starting late read it)."""
        if self.coordinating and self.spec.mode == "train":
            self.channel.put("progress", step)

    def _inner_round(
        self, step: int, first: int, H: int, allreduce: dist.ProcessGroup | None, clusters: int
    ) -> tuple[list[float], InnerStepStats, float, float, int]:
        self.progress.start_step(step, H)
        losses: list[torch.Tensor] = []  # read from the device once, after the round
        comm = 0.0
        sent = 0
        last: InnerStepStats | None = None
        started = time.perf_counter()
        forgery = self.spec.forgery
        for i in range(first, first + H):
            if forgery is None or not forgery.skips(self.cluster, step, i - first):
                window = (
                    i if forgery is None else forgery.window_step(self.cluster, step, i - first, i)
                )
                inputs, targets = self.reader.train_batch(self.cluster, window)
                if self.groups.data is not None:
                    inputs, targets = replica_rows(
                        inputs, targets, replica=self.replica, replicas=self.replicas
                    )
                self.inner.zero_grad()
                loss = self.runner.train_step(inputs, targets)
                if self.groups.data is not None:
                    average_gradients(list(self.module.parameters()), self.groups.data)
                lr_scale = 1.0 if forgery is None else forgery.lr_factor(self.cluster, step)
                last = self.inner.step(i, allreduce=allreduce, clusters=clusters, lr_scale=lr_scale)
                comm += last.comm_seconds
                sent += last.bytes_sent
                if loss is not None:
                    losses.append(loss)
            if self.commitments is not None:
                self.commitments.after_inner_step(i)
            self.progress.advance()
        assert last is not None  # H >= 1
        # One host sync for the round's losses (float32 each, then Python floats as before).
        read = torch.stack(losses).tolist() if losses else []
        return read, last, time.perf_counter() - started - comm, comm, sent

    def _cluster_numbers(
        self, losses: list[float], last: InnerStepStats, compute_per_step: float
    ) -> ClusterNumbers:
        """The round's numbers of this cluster, the same on each of its processes."""
        mine = [
            sum(losses) / len(losses) if losses else math.nan,
            last.grad_norm,
            compute_per_step,
            self.last_comm_seconds,
        ]
        everyone = gather_floats(mine, _world(), self.device)
        # Each replica's last stage measures the loss of its rows (cluster rank d * S + S - 1).
        last_stages = [everyone[d * self.stages + self.stages - 1][0] for d in range(self.replicas)]
        return ClusterNumbers(
            train_loss=ordered_sum(last_stages) / self.replicas,
            grad_norm=max(v[1] for v in everyone),
            lr=last.lr,
            compute_seconds_per_step=max(v[2] for v in everyone),
            comm_seconds=max(v[3] for v in everyone),
        )

    def _commit(
        self, step: int, contribution: Contribution, numbers: ClusterNumbers
    ) -> ContributionHeader:
        """Keep and sign this process's payload, then post its header (membership.py). A
        re-execution's recorder keeps the payload too (``--cluster J`` included): reproduce
        compares it with the recorded one."""
        own = ContributionDigest(cluster=self.cluster, stage=self.stage, digest=contribution.digest)
        # The signature covers the inner steps' commitments too (records/commitments.py):
        # they are complete once the contribution is computed.
        commitments = self.commitments.take() if self.commitments is not None else None
        payload = contribution.payload.cpu().numpy().tobytes()
        signed = self.recorder.publish_contribution(step, own, payload, commitments)
        header = self._header(step, contribution, signed, numbers)
        post_header(self.channel, header)
        if self.groups.data is not None and self.spec.mode != "contribute":
            dist.barrier(group=self.groups.data)  # the other replicas read the header next
        return header

    def _header(
        self,
        step: int,
        contribution: Contribution | None,
        signed: StageContribution | None,
        numbers: ClusterNumbers,
    ) -> ContributionHeader:
        return ContributionHeader(
            round=step,
            cluster=self.cluster,
            stage=self.stage,
            digest=contribution.digest if contribution is not None else "",
            length=int(contribution.payload.numel()) if contribution is not None else 0,
            signature_object=signed.signature_object if signed is not None else None,
            commitments_object=signed.commitments if signed is not None else None,
            stats=dict(contribution.stats) if contribution is not None else {},
            numbers=numbers,
            segments=list(contribution.segments) if contribution is not None else [],
        )

    def _fetch(self, digest: str) -> bytes | None:
        kept = self.spec.payloads.get(digest)
        return kept if kept is not None else self.recorder.fetch_contribution(digest)

    def _pending_digests(self, pending: Exchange | None) -> tuple[tuple[int, int, str], ...]:
        """(cluster, stage, digest) of the round in flight, every stage (the coordinator saves
        them)."""
        if pending is None:
            return ()
        digests = []
        for cluster in pending.contributors:
            for stage in range(self.stages):
                message = self.channel.get(header_key(pending.round, cluster, stage))
                if message is None:
                    raise WorkerError(
                        f"round {pending.round}: no header of cluster "
                        f"{cluster} stage {stage} on the channel"
                    )
                digests.append((cluster, stage, ContributionHeader.from_message(message).digest))
        return tuple(digests)

    def _step_tokens(self, H: int, clusters: int) -> int:
        """Input tokens ``clusters`` clusters train on in a step of H inner steps."""
        return clusters * H * self.spec.rule.sequences_per_step * self.config.model.context

    def _sync_tied_copy(self) -> None:
        if self.groups.embedding is None:
            return
        # From this replica's stage 0 (global rank 0 of the cluster's world only in replica 0).
        source = dist.get_global_rank(self.groups.embedding, 0)
        broadcast_tensors([self.module.tied_weight()], source=source, group=self.groups.embedding)

    def _next_inner_steps(self, H: int, quorum: RoundQuorum | None) -> int:
        outer = self.config.outer
        if (
            self.outer is None
            or not outer.adaptive_inner_steps
            or self.spec.mode == "contribute"
            or quorum is None
        ):
            return H
        # Every cluster must pick the same H: decide from the slowest contributor's timings,
        # which every member read from the same headers.
        numbers = [h.numbers for h in quorum.headers.values()]
        return next_inner_steps(
            H,
            comm_seconds=max(n.comm_seconds for n in numbers),
            compute_seconds_per_step=max(n.compute_seconds_per_step for n in numbers),
            min_steps=outer.min_inner_steps,
            max_steps=outer.max_inner_steps,
        )

    def _global_parameters(self) -> list[torch.Tensor] | None:
        """The outer algorithm's θ when it can tell (trainer/outer's algorithms can; the seam's
        protocol does not require it): under the one-step delay the local parameters are a
        look-ahead of θ, and θ is the model worth evaluating and publishing."""
        view = getattr(self.outer, "global_parameters", None)
        return list(view()) if callable(view) else None

    def _evaluate(self) -> float | None:
        """Held-out loss of θ (cluster 0's pipeline). In blocking mode the local parameters
        already are θ; under the delay θ is swapped in for the evaluation and swapped back."""
        global_params = (
            self._global_parameters() if self.outer is not None and self.outer.overlapped else None
        )
        if global_params is None:
            return self.runner.evaluate(self.eval_batches)
        saved = [p.detach().clone() for p in self.module.parameters()]
        with torch.no_grad():
            for param, value in zip(self.outer_params, global_params, strict=True):
                param.copy_(value)
            self._sync_tied_copy()
            loss = self.runner.evaluate(self.eval_batches)
            for param, value in zip(self.module.parameters(), saved, strict=True):
                param.copy_(value)
        return loss

    def _save(self, step: int, cursor: Cursor) -> dict[str, str]:
        global_params = self._global_parameters()
        files = stage_files(
            module=self.module,
            inner=self.inner,
            outer=self.outer,
            cluster=self.cluster,
            stage=self.stage,
            stages=self.stages,
            save_local=self.outer is not None and self.outer.overlapped,
            weights=dict(zip(self.outer_names, global_params, strict=True))
            if global_params is not None
            else None,
        )
        applied_payloads = getattr(self.outer, "applied_payloads", None)  # trainer/outer's have it
        if self.cluster == 0 and callable(applied_payloads) and applied_payloads():
            # What this step's verdicts were reached on, for a verifier to recompute them.
            files[exchange_file(self.stage)] = exchange_tensors(applied_payloads())
        json_files: dict[str, Any] = {}
        if self.coordinating:
            # The coordinator makes the step's folder a Hugging Face model repo (DESIGN.md §6).
            json_files.update(self.repo_files)
            json_files[TRAINER_STATE] = trainer_state_document(
                cursor,
                step=step,
                config_digest=self.spec.config_digest,
                method=self.config.method,
                clusters=self.config.clusters,
                stages=self.stages,
            )
        return dict(self.recorder.save_state(step, files, json_files))

    # -- the end of a step: reports, attestation, the record ------------------------------
    def _finish(
        self,
        step: int,
        H: int,
        cursor: Cursor,
        report: RankReport,
        quorum_id: int,
        contributors: tuple[int, ...],
        started: float,
    ) -> dict[str, float]:
        first = self.stage == 0 and not self.follower
        gathered: list[RankReport | None] = [None] * self.topology.per_cluster if first else []
        dist.gather_object(report, gathered if first else None, dst=0)
        if not first:
            return {}
        # Replica 0's processes report the cluster (the other replicas hold the same state).
        mine = [r for r in gathered[: self.stages] if r is not None]
        if not self.coordinating:
            self._answer(step, mine)
            self._say(
                f"step {step}/{self.config.outer_steps - 1} contributed (quorum "
                f"{quorum_id}: clusters {','.join(map(str, contributors))})"
            )
            return {}
        others = [c for c in contributors if c != self.cluster]
        arrived = self.channel.wait_all(
            {c: f"step/{step}/reports/{c}" for c in others}, alive=self.alive
        )
        reports = mine + [report_from(m) for c in sorted(arrived) for m in arrived[c]]
        headers = self._round_headers(step, contributors)
        record = build_record(
            step=step,
            inner_steps=H,
            method=self.config.method,
            first_inner_step=cursor.inner_steps_done - H,
            tokens_before=cursor.tokens - self._step_tokens(H, len(contributors)),
            rule=self.spec.rule,
            quorum=Quorum.after(quorum_id, contributors, self.previous_clusters),
            headers=headers,
            reports=reports,
            wall_seconds=time.perf_counter() - started,
            data_parallel=self.replicas,
            owner_reduce=self.config.outer.owner_reduce,
        )
        request = self.recorder.prepare_outer_step(record)
        self.channel.put(f"step/{step}/request", request_message(request))
        evidence: list[ClusterEvidence] = [
            ClusterEvidence(
                cluster=c,
                stage=s,
                contribution=StageContribution(
                    stage=s,
                    digest=h.digest,
                    signature_object=h.signature_object,
                    commitments=h.commitments_object,
                ),
                quote=None,
            )
            for (c, s), h in sorted(headers.items())
            if h.signature_object is not None and h.commitments_object is not None
        ]
        own = self.recorder.attest(request, None) if request is not None else None
        if own is not None:
            evidence.append(own)
        answered = self.channel.wait_all(
            {c: f"step/{step}/evidence/{c}" for c in arrived}, alive=self.alive
        )
        evidence += [evidence_from(m) for c in sorted(answered) for m in answered[c]]
        record = replace(
            record, evidence=tuple(evidence), gone=tuple(c for c in others if c not in answered)
        )
        self.recorder.record_outer_step(record)
        self.previous_clusters = contributors
        if self.spec.mode == "train":
            self.channel.put(
                f"recorded/{step}",
                {"checkpoint": checkpoint_message(self.recorder.recorded_checkpoint(step))},
            )
        self.progress.finish_step(record)
        return dict(record.metrics)

    def _say(self, text: str) -> None:
        if self.talkative:
            print(f"cluster {self.cluster}: {text}", flush=True)

    def _answer(self, step: int, reports: list[RankReport]) -> None:
        """A cluster other than the coordinator's: post its reports, then quote for the step."""
        self.channel.put(
            f"step/{step}/reports/{self.cluster}", [report_message(r) for r in reports]
        )
        message = self.channel.wait(
            f"step/{step}/request",
            writer_alive=lambda: self.alive(0),
            what=f"the coordinator's request for step {step}",
        )
        request = request_from(message)
        evidence = self.recorder.attest(request, None) if request is not None else None
        self.channel.put(
            f"step/{step}/evidence/{self.cluster}", [evidence_message(evidence)] if evidence else []
        )

    def _round_headers(
        self, step: int, contributors: Sequence[int]
    ) -> dict[tuple[int, int], ContributionHeader]:
        """Every stage's header of every contributor of round ``step``."""
        keys = {}
        for cluster in contributors:
            for stage in range(self.stages):
                keys[cluster * self.stages + stage] = header_key(step, cluster, stage)
        got = self.channel.wait_all(keys, alive=lambda slot: self.alive(slot // self.stages))
        return {
            divmod(slot, self.stages): ContributionHeader.from_message(message)
            for slot, message in sorted(got.items())
        }

    def _run_start(self, cursor: Cursor, enrollments: Sequence[ClusterKeys]) -> RunStart:
        config = self.config
        layout = [list(r) for r in stage_layout(config.model.num_hidden_layers, config.stages)]
        starting = sorted(k.cluster for k in enrollments) or list(self.topology.present)
        return RunStart(
            run_id=config.run_id,
            config=config.to_dict(),
            config_digest=self.spec.config_digest,
            topology={
                **self.topology.to_dict(),
                "present": starting,
                "backend": dist.get_backend(),
                "device": self.device.type,
            },
            model={
                **config.model.to_dict(),
                "parameter_count": config.model.parameter_count(),
                "stage_blocks": layout,
            },
            data_manifest=self.spec.manifest,
            shard_source=self.spec.shards,
            seed=config.seed,
            resumed_from_step=cursor.next_step - 1 if cursor.next_step > 0 else None,
        )

    def _lighthouse_settings(self) -> LighthouseSettings:
        if self.spec.links.lighthouse is None:
            return LighthouseSettings()
        message = self.channel.global_message(SETTINGS_KEY)
        if message is None:
            raise ChannelError(
                "the lighthouse published no settings on "
                "its channel (is it a veritrain lighthouse?)"
            )
        return LighthouseSettings.from_message(message)

    def _check_same_data(self) -> None:
        """Every process of the cluster must train on the same corpus bytes (the clusters
        compare with cluster 0 when they join the run)."""
        digests: list[str | None] = [None] * self.topology.per_cluster
        dist.all_gather_object(digests, self.spec.manifest.digest())
        if len(set(digests)) != 1:
            raise DataError(
                "expected every process to build the same corpus, "
                f"got manifest digests {sorted(set(map(str, digests)))}"
                " (different Python versions or data files on different hosts?)"
            )


def _world() -> dist.ProcessGroup:
    group = dist.group.WORLD
    assert group is not None  # the default group exists once init_process_group has run
    return group
