"""How a process enters the run and where it starts from: the seed, a saved step, or -- when
its cluster joins a run under way or fell behind -- the state recorded after the round it
listened to (docs/trainer.md, "Clusters come and go").

In a training launch every cluster enrols (its speaker posts the cluster's keys); the
coordinator begins the run with every cluster's enrolment and posts ``begun``; the other
clusters check they train the same configuration and corpus, and load the recorded state when
the run is past the step they would start at.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch.distributed as dist

from records.genesis import ClusterKeys
from records.outer_step import CheckpointRef
from trainer.checkpoint_layout import (
    TRAINER_STATE,
    CheckpointFiles,
    inner_file,
    load_checkpoint_directory,
    model_file,
    outer_file,
)
from trainer.config import TrainConfig
from trainer.data.manifest import DataManifest
from trainer.data.shards import ShardSource
from trainer.errors import CheckpointError, ConfigError, DataError, WorkerError
from trainer.model import model_summary
from trainer.recorder import Recorder, RunIdentity, RunStart
from trainer.runtime.channel import RECORD_PATIENCE
from trainer.runtime.local_stage import LocalStage
from trainer.runtime.membership import RoundQuorum
from trainer.runtime.messages import checkpoint_from, checkpoint_message, keys_from, keys_message
from trainer.runtime.outer_sync import OuterSync
from trainer.runtime.owner_exchange import Exchange
from trainer.runtime.process_setup import Connections
from trainer.runtime.role import ProcessRole
from trainer.runtime.spec import START_TIMEOUT
from trainer.runtime.state import Cursor, pending_payloads, read_cursor, share_owner, state_owner
from trainer.runtime.topology import Topology


class Joining:
    def __init__(
        self,
        config: TrainConfig,
        *,
        role: ProcessRole,
        config_digest: str,
        manifest: DataManifest,
        shards: ShardSource,
        topology: Topology,
        device_type: str,
        stage: LocalStage,
        sync: OuterSync | None,
        recorder: Recorder,
        connections: Connections,
    ) -> None:
        self.config = config
        self.role = role
        self.config_digest = config_digest
        self.manifest = manifest
        self.shards = shards
        self.topology = topology
        self.device_type = device_type
        self.stage = stage
        self.sync = sync
        self.recorder = recorder
        self.channel = connections.channel
        self.alive = connections.alive
        # Patient with the coordinator: giving up on it ends this cluster's run, and a live one
        # can look silent while it builds the run's data and enrols the clusters (a loaded
        # machine starves its heartbeat thread), as with RECORD_PATIENCE.
        self.coordinator_alive = connections.alive.patient(RECORD_PATIENCE)
        self.membership = connections.membership

    def start(self, given: CheckpointFiles | Path | None) -> Cursor:
        """The cursor this process starts at: from the seed, or from its share of a saved step
        (in memory, or in a folder)."""
        resume = load_checkpoint_directory(given) if isinstance(given, Path) else given
        if resume is None:
            return Cursor(
                next_step=0,
                inner_steps_done=0,
                next_inner_steps=self.config.inner_steps_of(0),
                tokens=0,
            )
        return self._restore(resume, listened=None)

    def _restore(self, files: CheckpointFiles, *, listened: Exchange | None) -> Cursor:
        """Take this process's state from ``files`` (its share of a saved step)."""
        cursor = read_cursor(files, config_digest=self.config_digest)
        self.stage.restore(files)
        if self.sync is not None:
            self.sync.pending = None
            # A cluster re-executing alone applies the round in flight too under the short
            # overlap: its round starts before that apply and keeps its progress past it.
            applies = self.role.exchanges or self.config.outer.delay_in_use is not None
            if cursor.pending_round is not None and applies:
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
                    digests=cursor.pending_digests_of(self.role.stage),
                    payloads=payloads,
                )
        return cursor

    # -- joining the run ----------------------------------------------------------------
    def begin(self, cursor: Cursor) -> Cursor:
        """Enrol; the coordinator begins the run, the other clusters follow it (and catch up
        if it is already under way)."""
        assert not self.role.follower  # the replicas of a cluster enrol once, as replica 0
        config = self.config
        keys = self.recorder.enrol(
            RunIdentity(
                run_id=config.run_id, config_digest=self.config_digest, device=self.device_type
            )
        )
        if self.role.stage == 0:
            self.channel.put(f"enrol/{self.role.cluster}", {"keys": keys_message(keys)})
        if self.role.coordinating:
            fresh = cursor.next_step == 0
            enrollments = self._enrolments(
                range(config.clusters) if fresh else self.topology.present
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
                    "config_digest": self.config_digest,
                    "manifest": self.manifest.digest(),
                    "checkpoint": checkpoint_message(recorded),
                },
            )
            return cursor
        begun = self.channel.wait(
            "begun",
            writer_alive=lambda: self.coordinator_alive(0),
            what="the coordinator (cluster 0) to begin",
        )
        if begun["config_digest"] != self.config_digest:
            raise ConfigError(
                f"cluster 0 trains run {config.run_id!r} with "
                f"configuration {str(begun['config_digest'])[:12]}, this "
                f"cluster with {self.config_digest[:12]}: start "
                "it without a preset or config to take cluster 0's"
            )
        if begun["manifest"] != self.manifest.digest():
            raise DataError(
                "expected the corpus cluster 0 trains on "
                f"(manifest {str(begun['manifest'])[:16]}…), got "
                f"{self.manifest.digest()[:16]}… (different "
                "Python versions or data files on different hosts?)"
            )
        if self.channel.get("finished") is not None:
            raise WorkerError(f"run {config.run_id!r} has finished: there is nothing left to join")
        start = int(begun["next_step"])
        if start != cursor.next_step:
            if start == 0:
                raise CheckpointError(
                    f"cluster 0 starts run {config.run_id!r} "
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
            return self.catch_up(quorum, listened)
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

    def catch_up(self, quorum: RoundQuorum, listened: Exchange | None) -> Cursor:
        """This cluster listened to round ``quorum.round``: continue from the state recorded
        after it (docs/trainer.md, "Clusters come and go")."""
        if self.role.cluster == 0:
            raise WorkerError(
                "cluster 0 (the coordinator) fell behind the "
                f"quorum of round {quorum.round}: it cannot record "
                "steps it did not take part in; restart the run from its last recorded step"
            )
        self.role.say(
            f"the run is at round {quorum.round}: listening "
            "to it, then loading the state recorded after it"
        )
        message = self.channel.wait(
            f"recorded/{quorum.round}",
            writer_alive=lambda: self.coordinator_alive(0),
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
        cluster, stage, stages = self.role.cluster, self.role.stage, self.role.stages

        def names(available: Sequence[str]) -> list[str]:
            owner = state_owner(available, cluster=cluster, stages=stages)
            wanted = {
                TRAINER_STATE,
                model_file(stage, stages),
                inner_file(owner, stage),
                outer_file(owner, stage),
            }
            return [n for n in available if n in wanted]

        files = self.recorder.load_checkpoint(checkpoint, names) if checkpoint is not None else None
        if files is None:
            raise WorkerError(
                f"cluster {cluster} cannot load the state "
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
        owner = share_owner(files, stage=stage)
        self.role.say(
            f"loaded the state recorded after step {step} (cluster "
            f"{owner}'s); contributing from step {step + 1}"
        )
        return cursor

    def _run_start(self, cursor: Cursor, enrollments: Sequence[ClusterKeys]) -> RunStart:
        config = self.config
        starting = sorted(k.cluster for k in enrollments) or list(self.topology.present)
        return RunStart(
            run_id=config.run_id,
            config=config.to_dict(),
            config_digest=self.config_digest,
            topology=self.topology.recorded(
                present=starting, backend=dist.get_backend(), device=self.device_type
            ),
            model=model_summary(config.model, config.stages),
            data_manifest=self.manifest,
            shard_source=self.shards,
            seed=config.seed,
            resumed_from_step=cursor.next_step - 1 if cursor.next_step > 0 else None,
        )
