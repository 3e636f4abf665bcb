"""One training process: its stage of one cluster, from start (or a saved step) to the end.

Per outer step t (H inner steps), in every process:

1. H inner steps through the pipeline (trainer/runtime/pipeline.py, inner.py); the AllReduce
   baseline all-reduces gradients inside each of them;
2. the round's mean training loss over clusters is made identical on every rank
   (``RoundSignals``);
3. DiLoCo / DiLoCoX (trainer/runtime/outer_sync.py): ``contribution(t)`` -> all-gather over the stage's outer group -> ``apply``
   in the order of trainer/outer/protocol.py: blocking applies round t now; the one-step delay
   launches round t's exchange, applies round t-1's (which ran during this step's compute) and,
   at the run's last step, waits for and applies round t as well. After every apply the tied
   embedding's copy on the last stage is overwritten with stage 0's (the outer algorithm of
   the last stage does not own it, so the matrix is exchanged once);
4. cluster 0 evaluates the held-out batches;
5. adaptive H (when enabled) picks the next round's H from timings every rank agrees on;
6. every process hands its own files to ``recorder.save_state`` (the coordinator's include
   trainer_state.json and the model-repo files: config.json, generation_config.json, the
   tokenizer's); the coordinator gathers the small per-process reports and calls
   ``recorder.record_outer_step``.

Modes: ``train`` (a run or its resumption), ``reexecute`` (one step again, same processes, no
begin/end), ``contribute`` (one cluster alone, up to its contribution: no exchange, no eval,
no saved files).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist

from records.genesis import ClusterKeys
from trainer.checkpoint import (
    TRAINER_STATE,
    CheckpointFiles,
    exchange_file,
    exchange_tensors,
    load_checkpoint_directory,
)
from trainer.config import TrainConfig
from trainer.data.assignment import AssignmentRule
from trainer.data.manifest import DataManifest
from trainer.data.reader import BatchReader
from trainer.data.shards import ShardSource
from trainer.errors import CheckpointError, DataError
from trainer.hf_repo import TokenizerExport, repo_json_files
from trainer.model import TIED_HEAD, build_stage, stage_layout
from trainer.outer import build_outer_algorithm, next_inner_steps
from trainer.outer.protocol import OuterAlgorithm, RoundSignals
from trainer.recorder import (
    AttestationRequest,
    ClusterEvidence,
    ContributionDigest,
    ProcessInfo,
    RecorderFactory,
    RunIdentity,
    RunStart,
    RunSummary,
)
from trainer.runtime.collectives import broadcast_tensors, gather_floats, ordered_sum
from trainer.runtime.determinism import make_deterministic, pick_device
from trainer.runtime.inner import InnerOptimizer, InnerStepStats
from trainer.runtime.launch import Rendezvous, init_process_group, torchrun_rank
from trainer.runtime.outer_sync import OuterSync, StepExchange
from trainer.runtime.pipeline import PipelineRunner
from trainer.runtime.pipeline_judge import PipelineJudge
from trainer.runtime.poison import poison_local
from trainer.runtime.progress import ConsoleProgress, Progress, SilentProgress
from trainer.runtime.report import RankReport, build_record
from trainer.runtime.state import (
    Cursor,
    read_cursor,
    restore_stage,
    stage_files,
    trainer_state_document,
)
from trainer.runtime.topology import Topology, create_groups

Mode = Literal["train", "reexecute", "contribute"]


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
    resume: tuple[CheckpointFiles | Path, ...] | None
    """Per rank: the files of the step to continue from, in memory (torchrun: this process) or
    in a folder (spawned processes); None: start from the seed."""
    stop_step: int
    """Exclusive: the process stops before this outer step."""
    mode: Mode
    quiet: bool
    tokenizer: TokenizerExport = field(default_factory=TokenizerExport)
    """The tokenizer files and special ids every checkpoint carries (trainer/hf_repo.py)."""


def spawned_entry(rank: int, spec: WorkerSpec, rendezvous: Rendezvous, results: Any) -> None:
    """Entry point of a spawned process; rank 0 puts the run summary in ``results``."""
    summary = run_process(rank, spec, rendezvous=rendezvous, local_rank=rank)
    if summary is not None:
        results.put(summary)


def torchrun_entry(spec: WorkerSpec) -> RunSummary | None:
    rank, local_rank = torchrun_rank(spec.topology.world_size)
    return run_process(rank, spec, rendezvous=None, local_rank=local_rank)


def run_process(rank: int, spec: WorkerSpec, *, rendezvous: Rendezvous, local_rank: int) -> RunSummary | None:
    device = pick_device(spec.config.device, local_rank)
    make_deterministic(spec.config.seed, rank, device)
    init_process_group("nccl" if device.type == "cuda" else "gloo", rank, spec.topology.world_size, rendezvous)
    try:
        return _Process(rank, spec, device).run()
    finally:
        dist.destroy_process_group()


class _Process:
    def __init__(self, rank: int, spec: WorkerSpec, device: torch.device) -> None:
        config = spec.config
        self.rank, self.spec, self.config, self.device = rank, spec, config, device
        self.topology = spec.topology
        self.cluster, self.stage = self.topology.place(rank)
        self.info = ProcessInfo(
            rank=rank,
            world_size=self.topology.world_size,
            cluster=self.cluster,
            stage=self.stage,
            clusters=config.clusters,
            stages=config.stages,
        )
        self._check_same_data()
        tied = config.model.tie_word_embeddings
        self.groups = create_groups(self.topology, rank, tied_embeddings=tied)
        self.module = build_stage(config.model, stage=self.stage, n_stages=config.stages, seed=config.seed).to(device)
        self.runner = PipelineRunner(
            self.module,
            stage=self.stage,
            stages=config.stages,
            group=self.groups.pipeline,
            device=device,
            schedule=config.schedule,
            micro_batches=config.micro_batches,
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
            (name, p) for name, p in self.module.named_parameters()
            if not (self.module.holds_tied_copy and name == TIED_HEAD)
        ]
        self.outer_names = [name for name, _ in outer_named]
        self.outer_params = [p for _, p in outer_named]
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
                    last_stage_rank=self.topology.rank_of(self.cluster, config.stages - 1),
                    device=device,
                ),
            )
        self.eval_batches = (
            self.reader.eval_batches(config.eval_batches) if self.cluster == 0 and spec.mode != "contribute" else []
        )
        self.recorder = spec.recorder_factory(self.info)
        self.repo_files = repo_json_files(config.model, spec.tokenizer) if rank == 0 else {}
        self.sync = (
            OuterSync(
                self.outer,
                self.outer_params,
                group=self.groups.outer,
                device=device,
                last_step=config.outer_steps - 1,
                after_apply=self._sync_tied_copy,
            )
            if self.outer is not None
            else None
        )
        self.progress: Progress = (
            ConsoleProgress(outer_steps=config.outer_steps)
            if rank == 0 and not spec.quiet and spec.mode == "train"
            else SilentProgress()
        )

    # ------------------------------------------------------------------------------------
    def run(self) -> RunSummary | None:
        started = time.perf_counter()
        try:
            cursor = self._start()
            if self.spec.mode == "train":
                enrollments = self._enrol()
                if self.rank == 0:
                    self.recorder.begin(replace(self._run_start(cursor), enrollments=enrollments))
            metrics: dict[str, float] = {}
            for step in range(cursor.next_step, self.spec.stop_step):
                cursor, metrics = self._outer_step(step, cursor)
            if self.spec.mode != "train" or self.rank != 0:
                return None
            summary = RunSummary(
                run_id=self.config.run_id,
                steps=cursor.next_step,
                tokens=cursor.tokens,
                final_metrics=metrics,
                wall_seconds=time.perf_counter() - started,
            )
            self.recorder.end(summary)
            return summary
        finally:
            self.progress.close()
            self.recorder.close()

    def _start(self) -> Cursor:
        given = self.spec.resume[self.rank] if self.spec.resume is not None else None
        resume = load_checkpoint_directory(given) if isinstance(given, Path) else given
        if resume is None:
            return Cursor(next_step=0, inner_steps_done=0, next_inner_steps=self.config.inner_steps, tokens=0)
        cursor = read_cursor(resume, config_digest=self.spec.config_digest)
        restore_stage(
            resume,
            module=self.module,
            inner=self.inner,
            outer=self.outer,
            cluster=self.cluster,
            stage=self.stage,
            stages=self.config.stages,
        )
        self._sync_tied_copy()
        if self.sync is not None and cursor.pending_round is not None and self.spec.mode != "contribute":
            if cursor.pending_mean_train_loss is None:
                raise CheckpointError(f"expected the signals of pending round {cursor.pending_round}, they are missing")
            self.sync.restart(cursor.pending_round, cursor.pending_mean_train_loss)
        return cursor

    # ------------------------------------------------------------------------------------
    def _outer_step(self, step: int, cursor: Cursor) -> tuple[Cursor, dict[str, float]]:
        started = time.perf_counter()
        H = cursor.next_inner_steps
        poison = self.config.poison_for_testing
        poisoned = poison is not None and poison.step == step and poison.cluster == self.cluster
        round_start = [p.detach().clone() for p in self.outer_params] if poisoned else []

        losses, last, compute_seconds, inner_comm, inner_bytes = self._inner_round(step, cursor.inner_steps_done, H)
        signals = RoundSignals(mean_train_loss=self._mean_over_clusters(losses))

        exchanged: StepExchange | None = None
        note_round_data = getattr(self.outer, "note_round_data", None)  # trainer/outer's have it
        if callable(note_round_data):  # what the round trains on, for its contribution scores
            note_round_data(step, first_inner_step=cursor.inner_steps_done, inner_steps=H)
        if self.sync is not None:
            if poisoned and poison is not None:
                poison_local(self.outer_params, round_start, poison, seed=self.config.seed)
            exchanged = self.sync.step(step, signals, exchange=self.spec.mode != "contribute")

        eval_loss = self._evaluate() if self.eval_batches else None
        comm_seconds = inner_comm + (exchanged.comm_seconds if exchanged else 0.0)
        next_H = self._next_inner_steps(H, compute_seconds, comm_seconds)
        pending = self.sync.pending if self.sync is not None else None
        cursor = Cursor(
            next_step=step + 1,
            inner_steps_done=cursor.inner_steps_done + H,
            next_inner_steps=next_H,
            tokens=cursor.tokens + self._step_tokens(H),
            pending_round=pending.round if pending else None,
            pending_mean_train_loss=pending.signals.mean_train_loss if pending else None,
        )
        files = self._save(step, cursor) if self.spec.mode != "contribute" else {}
        report = RankReport(
            cluster=self.cluster,
            stage=self.stage,
            files=files,
            contribution_digest=exchanged.contribution.digest if exchanged else None,
            contribution_stats=dict(exchanged.contribution.stats) if exchanged else {},
            updates=exchanged.updates if exchanged else [],
            train_loss=sum(losses) / len(losses) if losses else None,
            eval_loss=eval_loss,
            grad_norm=last.grad_norm,
            lr=last.lr,
            compute_seconds=compute_seconds,
            comm_seconds=comm_seconds,
            exposed_comm_seconds=inner_comm + (exchanged.exposed_seconds if exchanged else 0.0),
            bytes_sent=inner_bytes + (int(exchanged.contribution.payload.numel()) if exchanged else 0),
        )
        return cursor, self._report(step, H, cursor, report, started)

    def _inner_round(
        self, step: int, first: int, H: int
    ) -> tuple[list[float], InnerStepStats, float, float, int]:
        self.progress.start_step(step, H)
        losses: list[float] = []
        comm = 0.0
        sent = 0
        last: InnerStepStats | None = None
        started = time.perf_counter()
        allreduce = self.groups.outer if self.config.method == "allreduce" else None
        for i in range(first, first + H):
            inputs, targets = self.reader.train_batch(self.cluster, i)
            self.inner.zero_grad()
            loss = self.runner.train_step(inputs, targets)
            last = self.inner.step(i, allreduce=allreduce, clusters=len(self.topology.present))
            comm += last.comm_seconds
            sent += last.bytes_sent
            if loss is not None:
                losses.append(loss)
            self.progress.advance()
        assert last is not None  # H >= 1
        return losses, last, time.perf_counter() - started - comm, comm, sent

    def _step_tokens(self, H: int) -> int:
        """Input tokens all present clusters train on in a step of H inner steps."""
        return len(self.topology.present) * H * self.spec.rule.sequences_per_step * self.config.model.context

    def _mean_over_clusters(self, losses: list[float]) -> float:
        """The mean over clusters of each cluster's mean loss this round, on every rank."""
        mine = sum(losses) / len(losses) if losses else math.nan
        everyone = gather_floats([mine], _world(), self.device)
        last_stages = [everyone[self.topology.rank_of(c, self.config.stages - 1)][0] for c in self.topology.present]
        return ordered_sum(last_stages) / len(last_stages)

    def _sync_tied_copy(self) -> None:
        if self.groups.embedding is None:
            return
        source = self.topology.rank_of(self.cluster, 0)
        broadcast_tensors([self.module.tied_weight()], source=source, group=self.groups.embedding)

    def _next_inner_steps(self, H: int, compute_seconds: float, comm_seconds: float) -> int:
        outer = self.config.outer
        if self.outer is None or not outer.adaptive_inner_steps or self.spec.mode == "contribute":
            return H
        # Every rank must pick the same H: decide from the slowest process's timings.
        everyone = gather_floats([compute_seconds / H, comm_seconds], _world(), self.device)
        return next_inner_steps(
            H,
            comm_seconds=max(v[1] for v in everyone),
            compute_seconds_per_step=max(v[0] for v in everyone),
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
        global_params = self._global_parameters() if self.outer is not None and self.outer.overlapped else None
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
            stages=self.config.stages,
            save_local=self.outer is not None and self.outer.overlapped,
            weights=dict(zip(self.outer_names, global_params, strict=True)) if global_params is not None else None,
        )
        applied_payloads = getattr(self.outer, "applied_payloads", None)  # trainer/outer's have it
        if self.cluster == 0 and callable(applied_payloads) and applied_payloads():
            # What this step's verdicts were reached on, for a verifier to recompute them.
            files[exchange_file(self.stage)] = exchange_tensors(applied_payloads())
        json_files: dict[str, Any] = {}
        if self.rank == 0:
            # The coordinator makes the step's folder a Hugging Face model repo (DESIGN.md §6).
            json_files.update(self.repo_files)
            json_files[TRAINER_STATE] = trainer_state_document(
                cursor,
                step=step,
                config_digest=self.spec.config_digest,
                method=self.config.method,
                clusters=self.config.clusters,
                stages=self.config.stages,
            )
        return dict(self.recorder.save_state(step, files, json_files))

    def _enrol(self) -> tuple[ClusterKeys, ...]:
        """Every process offers its cluster's enrolment (made in its own process, with keys
        from its own key folder); the coordinator receives them all."""
        mine = self.recorder.enrol(RunIdentity(run_id=self.config.run_id, config_digest=self.spec.config_digest))
        offered: list[ClusterKeys | None] = [None] * self.topology.world_size if self.rank == 0 else []
        dist.gather_object(mine, offered if self.rank == 0 else None, dst=0)
        return tuple(sorted((k for k in offered if k is not None), key=lambda k: k.cluster))

    def _attest(self, request: AttestationRequest | None, report: RankReport) -> list[ClusterEvidence]:
        """Every process signs what is its own (its contribution; its cluster's quote) in its own
        process and hands the signed objects to the coordinator, which cannot make them."""
        box: list[AttestationRequest | None] = [request]
        dist.broadcast_object_list(box, src=0)
        if box[0] is None:
            return []
        digest = report.contribution_digest
        own = ContributionDigest(cluster=self.cluster, stage=self.stage, digest=digest) if digest else None
        evidence = self.recorder.attest(box[0], own)
        gathered: list[ClusterEvidence | None] = [None] * self.topology.world_size if self.rank == 0 else []
        dist.gather_object(evidence, gathered if self.rank == 0 else None, dst=0)
        return [e for e in gathered if e is not None]

    def _report(self, step: int, H: int, cursor: Cursor, report: RankReport, started: float) -> dict[str, float]:
        reports: list[RankReport | None] = [None] * self.topology.world_size if self.rank == 0 else []
        dist.gather_object(report, reports if self.rank == 0 else None, dst=0)
        if self.rank != 0:
            self._attest(None, report)
            return {}
        record = build_record(
            step=step,
            inner_steps=H,
            method=self.config.method,
            first_inner_step=cursor.inner_steps_done - H,
            tokens_before=cursor.tokens - self._step_tokens(H),
            rule=self.spec.rule,
            reports=[r for r in reports if r is not None],
            wall_seconds=time.perf_counter() - started,
        )
        evidence = self._attest(self.recorder.prepare_outer_step(record), report)
        record = replace(record, evidence=tuple(evidence))
        self.recorder.record_outer_step(record)
        self.progress.finish_step(record)
        return dict(record.metrics)

    def _run_start(self, cursor: Cursor) -> RunStart:
        config = self.config
        layout = [list(r) for r in stage_layout(config.model.num_hidden_layers, config.stages)]
        return RunStart(
            run_id=config.run_id,
            config=config.to_dict(),
            config_digest=self.spec.config_digest,
            topology={**self.topology.to_dict(), "backend": dist.get_backend(), "device": self.device.type},
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

    def _check_same_data(self) -> None:
        """Every process (on every host) must train on the same corpus bytes."""
        digests: list[str | None] = [None] * self.topology.world_size
        dist.all_gather_object(digests, self.spec.manifest.digest())
        if len(set(digests)) != 1:
            raise DataError(
                f"expected every process to build the same corpus, got manifest digests {sorted(set(map(str, digests)))}"
                " (different Python versions or data files on different hosts?)"
            )


def _world() -> dist.ProcessGroup:
    group = dist.group.WORLD
    assert group is not None  # the default group exists once init_process_group has run
    return group
