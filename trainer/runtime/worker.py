"""One training process: its stage of one cluster (one of the stage's D data-parallel replicas,
data_parallel.py), from start (or a saved step) to the end.

Each cluster is its own ``torch.distributed`` world; clusters meet only in torchft's quorums
(membership.py) and on the run channel (channel.py). Per outer step t (H inner steps), in
every process:

1. H inner steps through the pipeline (inner_round.py); the AllReduce baseline all-reduces
   gradients over the stage's quorum group inside each of them;
2. the cluster's numbers of the round (training loss, gradient norm, timings) are gathered
   over the cluster's world, so each of its processes holds the same (inner_round.py);
3. DiLoCo / DiLoCoX (outer_sync.py): ``contribution(t)`` -> the payload is kept and signed and
   its header posted (publishing.py) -> quorum -> all-gather over the stage's quorum group ->
   ``apply`` in the order of trainer/outer/protocol.py. After every apply the tied embedding's
   copy on the last stage is overwritten with stage 0's (local_stage.py). A quorum for a later
   round means this cluster fell behind: it listens to that round's exchange, loads the state
   recorded after it and goes on from there (joining.py);
4. cluster 0 evaluates the held-out batches;
5. adaptive H (when enabled) picks the next round's H from the contributors' headers;
6. every process hands its own files to ``recorder.save_state`` (the coordinator's include
   trainer_state.json and the model-repo files), replica 0 hands its parameters and cursor to
   the other replicas (replicas.py), and the step is reported and recorded
   (step_reporting.py).

This module runs those phases in order; each collaborator gets what it needs explicitly:
``ProcessRole`` (role.py: who the process is), ``LocalStage`` (its model, optimisers and
state), ``Connections`` (process_setup.py: channel, liveness, membership), ``Joining``,
``InnerRound``, ``ContributionPublisher``, ``ReplicaGroup`` and ``StepReporting``.

Modes (spec.py): ``train`` (a run, its resumption, or one cluster of it), ``reexecute`` (one
recorded step again, with the clusters that took part in it, no begin/end), ``contribute`` (one
cluster alone, up to its contribution: no exchange, no eval, no saved files).
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from records.commitments import InnerCommitments
from trainer.checkpoint_layout import TRAINER_STATE
from trainer.data.reader import BatchReader
from trainer.errors import WorkerError
from trainer.hf_repo import repo_json_files
from trainer.outer import next_inner_steps
from trainer.recorder import ProcessInfo, RunSummary
from trainer.runtime.determinism import make_deterministic, pick_device
from trainer.runtime.exchange import shard_length
from trainer.runtime.inner_round import InnerRound, RoundCompute
from trainer.runtime.joining import Joining
from trainer.runtime.launch import init_cluster_world, torchrun_rank
from trainer.runtime.local_stage import LocalStage
from trainer.runtime.membership import RoundQuorum
from trainer.runtime.outer_sync import OuterSync, StepExchange
from trainer.runtime.process_setup import Connections, check_same_data
from trainer.runtime.progress import ConsoleProgress, Progress, SilentProgress
from trainer.runtime.publishing import ContributionPublisher
from trainer.runtime.replicas import ReplicaGroup
from trainer.runtime.report import RankReport
from trainer.runtime.role import ProcessRole
from trainer.runtime.spec import WorkerSpec
from trainer.runtime.state import Cursor, trainer_state_document
from trainer.runtime.step_reporting import StepReporting
from trainer.runtime.topology import create_groups


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
    """The phases of one process, in order; the work is its collaborators'."""

    def __init__(self, index: int, spec: WorkerSpec, device: torch.device) -> None:
        config = spec.config
        self.spec, self.config = spec, config
        topology = spec.topology
        role = self.role = ProcessRole.of(index, topology, mode=spec.mode, quiet=spec.quiet)
        check_same_data(spec.manifest, topology.per_cluster)
        groups = create_groups(
            role.stages,
            role.stage,
            tied_embeddings=config.model.tie_word_embeddings,
            data_parallel=role.replicas,
            replica=role.replica,
        )
        self.replicas = (
            ReplicaGroup(groups.data, cluster=role.cluster, replica=role.replica)
            if groups.data is not None
            else None
        )
        stage = self.stage = LocalStage(
            config,
            role=role,
            topology=topology,
            groups=groups,
            reader=BatchReader(spec.manifest, spec.rule, spec.shards),
            device=device,
        )
        self.recorder = recorder = spec.recorder_factory(
            ProcessInfo(
                rank=topology.global_rank(role.cluster, role.stage, role.replica),
                world_size=config.world_size,
                cluster=role.cluster,
                stage=role.stage,
                clusters=config.clusters,
                stages=config.stages,
            )
        )
        self.repo_files = repo_json_files(config.model, spec.tokenizer) if role.coordinating else {}
        self.connections = connections = Connections.open(
            role=role, run_id=config.run_id, links=spec.links, groups=groups
        )
        self.publisher = ContributionPublisher(
            role=role,
            recorder=recorder,
            channel=connections.channel,
            commitments=stage.commitments,
            replicas=self.replicas,
            payloads=spec.payloads,
        )
        self.sync = (
            OuterSync(
                stage.outer,
                stage.outer_params,
                membership=connections.membership,
                commit=self.publisher.commit,
                fetch=self.publisher.fetch,
                last_step=config.outer_steps - 1,
                after_apply=stage.sync_tied_copy,
            )
            if stage.outer is not None
            else None
        )
        self.progress: Progress = (
            ConsoleProgress(outer_steps=config.outer_steps)
            if role.coordinating and not spec.quiet and spec.mode == "train"
            else SilentProgress()
        )
        self.joining = Joining(
            config,
            role=role,
            config_digest=spec.config_digest,
            manifest=spec.manifest,
            shards=spec.shards,
            topology=topology,
            device_type=device.type,
            stage=stage,
            sync=self.sync,
            recorder=recorder,
            connections=connections,
        )
        self.inner_round = InnerRound(
            stage, role=role, progress=self.progress, device=device, forgery=spec.forgery
        )
        self.reporting = StepReporting(
            config,
            role=role,
            topology=topology,
            rule=spec.rule,
            recorder=recorder,
            connections=connections,
            progress=self.progress,
        )
        self.last_comm_seconds = 0.0
        """This process's communication seconds in the previous step (the next header's)."""

    def run(self) -> RunSummary | None:
        started = time.perf_counter()
        try:
            given = self.spec.resume[self.role.index] if self.spec.resume is not None else None
            cursor = self.joining.start(given)
            if self.spec.mode == "train":
                cursor = self.joining.begin(cursor) if not self.role.follower else cursor
                if self.replicas is not None:
                    self.replicas.check_start(cursor.next_step)
            metrics: dict[str, float] = {}
            while cursor.next_step < self.spec.stop_step:
                cursor, metrics = self._outer_step(cursor.next_step, cursor)
            if self.spec.mode != "train" or not self.role.coordinating:
                return None
            summary = RunSummary(
                run_id=self.config.run_id,
                steps=cursor.next_step,
                tokens=cursor.tokens,
                final_metrics=metrics,
                wall_seconds=time.perf_counter() - started,
            )
            self.recorder.end(summary)
            self.connections.channel.put("finished", {"steps": summary.steps})
            return summary
        finally:
            self.progress.close()
            self.recorder.close()
            self.connections.close()

    def _outer_step(self, step: int, before: Cursor) -> tuple[Cursor, dict[str, float]]:
        started = time.perf_counter()
        role, stage, spec = self.role, self.stage, self.spec
        H = before.next_inner_steps
        forgery = spec.forgery
        poison = self.config.poison_for_testing or (
            forgery.poison() if forgery is not None else None
        )
        if stage.commitments is not None:
            stage.commitments.begin(step)
        stage.begin_step()
        poisoned = poison is not None and poison.step == step and poison.cluster == role.cluster
        round_start = [p.detach().clone() for p in stage.outer_params] if poisoned else []

        members: RoundQuorum | None = None
        quorum_seconds = 0.0
        if self.sync is None and role.exchanges:
            asked = time.perf_counter()
            # the AllReduce baseline needs its group now
            members = self.connections.membership.quorum(step)
            quorum_seconds = time.perf_counter() - asked
            self.reporting.announce(step)
        n_clusters = len(members.members) if members is not None else 1
        group = self.connections.membership.process_group() if members is not None else None
        apply_after = None
        if self.sync is not None and self.sync.apply_delay is not None:
            apply_after = (self.sync.apply_delay, self.sync.apply_pending)  # the short overlap
        done = self.inner_round.run(
            step, before.inner_steps_done, H, group, n_clusters, apply_after=apply_after
        )
        numbers = self.inner_round.cluster_numbers(
            done, inner_steps=H, previous_comm_seconds=self.last_comm_seconds
        )

        exchanged: StepExchange | None = None
        stage.note_round_data(step, first_inner_step=before.inner_steps_done, inner_steps=H)
        if self.sync is not None:
            hidden = forgery is not None and forgery.hidden_from_commitments
            if poisoned and poison is not None and not hidden:
                stage.poison(round_start, poison, seed=self.config.seed)
            if stage.commitments is not None:
                stage.commitments.contributed()
            if poisoned and poison is not None and hidden:  # forgery.py: ``payload_scale``
                stage.poison(round_start, poison, seed=self.config.seed)
            exchanged = self.sync.step(step, numbers, exchange=role.exchanges)
            if exchanged.listened is not None and exchanged.quorum is not None:
                if self.replicas is not None:
                    raise WorkerError(
                        f"cluster {role.cluster} fell behind round "
                        f"{exchanged.quorum.round}: catching up is not "
                        "implemented with data_parallel > 1; "
                        "restart the run from its last recorded step"
                    )
                return self.joining.catch_up(exchanged.quorum, exchanged.listened), {}
            if role.follower:
                return self._follow(step, H, before, done, exchanged, started)
            if exchanged.quorum is not None:
                self.reporting.announce(step)
        else:
            self.publisher.post_numbers(step, numbers)
        quorum = exchanged.quorum if exchanged is not None else members
        contributors = (
            quorum.contributors
            if exchanged is not None and quorum is not None
            else quorum.members
            if quorum is not None
            else (role.cluster,)
        )
        if role.exchanges and 0 not in contributors:
            raise WorkerError(
                "cluster 0 (the coordinator) did not take part in "
                f"round {step}: the run cannot record without it; "
                "restart the run from its last recorded step"
            )

        eval_loss = stage.evaluate() if stage.eval_batches else None
        comm_seconds = done.comm_seconds + (exchanged.comm_seconds if exchanged else 0.0)
        self.last_comm_seconds = comm_seconds
        pending = self.sync.pending if self.sync is not None else None
        cursor = Cursor(
            next_step=step + 1,
            inner_steps_done=before.inner_steps_done + H,
            next_inner_steps=self._next_inner_steps(step, H, quorum),
            tokens=before.tokens + self._step_tokens(H, len(contributors)),
            pending_round=pending.round if pending else None,
            pending_mean_train_loss=pending.signals.mean_train_loss if pending else None,
            clusters=tuple(contributors),
            pending_digests=self.reporting.pending_digests(pending) if role.coordinating else (),
        )
        if self.replicas is not None:
            self.replicas.lead(list(stage.module.parameters()), cursor)
        files = self._save(step, cursor) if role.exchanges else {}
        report = RankReport(
            commitments=self._reported_commitments(),
            cluster=role.cluster,
            stage=role.stage,
            files=files,
            updates=exchanged.updates if exchanged else [],
            eval_loss=eval_loss,
            compute_seconds=done.compute_seconds,
            comm_seconds=comm_seconds,
            exposed_comm_seconds=done.comm_seconds
            + (exchanged.exposed_seconds if exchanged else 0.0),
            quorum_seconds=quorum_seconds + (exchanged.quorum_seconds if exchanged else 0.0),
            bytes_sent=done.bytes_sent + (self._exchange_bytes(exchanged) if exchanged else 0),
        )
        metrics = self.reporting.finish(
            step,
            report,
            before=before,
            inner_steps=H,
            quorum_id=quorum.id if quorum is not None else 0,
            contributors=tuple(contributors),
            started=started,
        )
        return cursor, metrics

    def _follow(
        self,
        step: int,
        H: int,
        before: Cursor,
        done: RoundCompute,
        exchanged: StepExchange,
        started: float,
    ) -> tuple[Cursor, dict[str, float]]:
        """A replica other than 0 after its outer step: replica 0's cursor, and its report."""
        assert self.replicas is not None  # a follower is a replica of a stage with D > 1
        cursor = self.replicas.follow(list(self.stage.module.parameters()))
        report = RankReport(
            commitments=None,
            cluster=self.role.cluster,
            stage=self.role.stage,
            files={},
            updates=[],
            eval_loss=None,
            compute_seconds=done.compute_seconds,
            comm_seconds=done.comm_seconds + exchanged.comm_seconds,
            exposed_comm_seconds=done.comm_seconds + exchanged.exposed_seconds,
            quorum_seconds=exchanged.quorum_seconds,
            bytes_sent=done.bytes_sent + self._exchange_bytes(exchanged),
        )
        metrics = self.reporting.finish(
            step,
            report,
            before=before,
            inner_steps=H,
            quorum_id=0,
            contributors=cursor.clusters,
            started=started,
        )
        return cursor, metrics

    def _reported_commitments(self) -> InnerCommitments | None:
        """The step's commitments for its record, when the record needs them: a re-execution's
        record is compared with the signed ones (veritrain/audit/reproduce.py). A training run's
        processes each store and sign their own with their contribution (publishing.py), and
        the entry names those objects; sending them again would put ~100 kB a step on the slow
        link for every stage (measured at tiny, 25 inner steps: 106 of a report's 111 kB)."""
        commitments = self.stage.commitments
        if commitments is None or self.spec.mode == "train":
            return None
        return commitments.step_commitments()

    def _exchange_bytes(self, exchanged: StepExchange) -> int:
        """Bytes this process put on the wire between clusters in the round: its stage's
        payload, or with D replicas its 1/D slice of it (exchange.py, ``ExchangeShard``)."""
        length = int(exchanged.contribution.payload.numel())
        replicas = self.role.replicas
        return length if replicas == 1 else shard_length(length, replicas)

    def _step_tokens(self, H: int, clusters: int) -> int:
        """Input tokens ``clusters`` clusters train on in a step of H inner steps."""
        return clusters * H * self.spec.rule.sequences_per_step * self.config.model.context

    def _next_inner_steps(self, step: int, H: int, quorum: RoundQuorum | None) -> int:
        outer = self.config.outer
        if not outer.adaptive_inner_steps:
            # The plan: H, or with ``warmup_round`` the next round's share (none after the last).
            return self.config.inner_steps_of(step + 1) if step + 1 < self.config.outer_steps else H
        if self.stage.outer is None or not self.role.exchanges or quorum is None:
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

    def _save(self, step: int, cursor: Cursor) -> dict[str, str]:
        """This process's files of the step, kept by its recorder (name -> sha256)."""
        json_files: dict[str, Any] = {}
        if self.role.coordinating:
            # The coordinator makes the step's folder a Hugging Face model repo (DESIGN.md §6).
            json_files.update(self.repo_files)
            json_files[TRAINER_STATE] = trainer_state_document(
                cursor,
                step=step,
                config_digest=self.spec.config_digest,
                method=self.config.method,
                clusters=self.config.clusters,
                stages=self.role.stages,
            )
        return dict(self.recorder.save_state(step, self.stage.state_files(), json_files))
