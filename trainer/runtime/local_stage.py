"""This process's stage of the model and what trains it: the module and its pipeline runner,
the inner optimiser, the outer algorithm and the per-inner-step commitments, built once per
process; plus what is done to the stage's state as a whole (save, restore, evaluate θ).

The last stage's copy of a tied embedding is not the outer algorithm's to update: stage 0 owns
the matrix and the copy follows it (``sync_tied_copy``, after every apply and restore).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from trainer.checkpoint_layout import CheckpointFiles, exchange_file, exchange_tensors
from trainer.config import PoisonForTesting, TrainConfig
from trainer.data.reader import BatchReader
from trainer.model import TIED_HEAD, build_stage
from trainer.outer import build_outer_algorithm
from trainer.outer.protocol import OuterAlgorithm
from trainer.precision import parameter_dtype
from trainer.runtime.collectives import broadcast_tensors
from trainer.runtime.commitments import StageCommitments
from trainer.runtime.inner import InnerOptimizer
from trainer.runtime.pipeline import PipelineRunner
from trainer.runtime.pipeline_judge import PipelineJudge
from trainer.runtime.poison import poison_local
from trainer.runtime.role import ProcessRole
from trainer.runtime.state import StageState, restore_stage, share_owner, stage_files
from trainer.runtime.topology import ProcessGroups, Topology


class LocalStage:
    def __init__(
        self,
        config: TrainConfig,
        *,
        role: ProcessRole,
        topology: Topology,
        groups: ProcessGroups,
        reader: BatchReader,
        device: torch.device,
    ) -> None:
        self.role, self.groups, self.reader = role, groups, reader
        stage, stages = role.stage, role.stages
        self.module = build_stage(
            config.model,
            stage=stage,
            n_stages=stages,
            seed=config.seed,
            activation_checkpointing=config.activation_checkpointing,
        ).to(device, dtype=parameter_dtype(config.precision))
        self.runner = PipelineRunner(
            self.module,
            stage=stage,
            stages=stages,
            group=groups.pipeline,
            device=device,
            schedule=config.schedule,
            micro_batches=config.micro_batches,
            precision=config.precision,
        )
        self.inner = InnerOptimizer(
            self.module,
            config.inner,
            planned_steps=config.planned_inner_steps,
            pipeline=groups.pipeline,
            embedding=groups.embedding,
            device=device,
        )
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
            StageCommitments(outer_named, run_id=config.run_id, cluster=role.cluster, stage=stage)
            if config.method != "allreduce" and not role.follower
            else None
        )
        self.outer: OuterAlgorithm | None = None
        if config.method != "allreduce":
            self.outer = build_outer_algorithm(
                config.outer,
                named_params=[(name, p.detach()) for name, p in outer_named],
                cluster=role.cluster,
                n_clusters=config.clusters,
                seed=config.seed,
                judge=PipelineJudge(  # the cluster's stages reach one verdict together
                    config.outer,
                    params=self.outer_params,
                    sync_tied=self.sync_tied_copy,
                    runner=self.runner,
                    reader=reader,
                    group=groups.pipeline,
                    # its rank in the cluster's world (replica d's stages are d*S .. d*S+S-1)
                    last_stage_rank=topology.cluster_rank(stages - 1, role.replica),
                    device=device,
                ),
            )
        self.eval_batches = (
            reader.eval_batches(config.eval_batches)
            if role.cluster == 0 and not role.follower and role.mode != "contribute"
            else []
        )

    @property
    def overlapped(self) -> bool:
        """Under the one-step delay (DiLoCoX §3.3) the local parameters run a round ahead of θ."""
        return self.outer is not None and self.outer.overlapped

    def sync_tied_copy(self) -> None:
        if self.groups.embedding is None:
            return
        # From this replica's stage 0 (global rank 0 of the cluster's world only in replica 0).
        source = dist.get_global_rank(self.groups.embedding, 0)
        broadcast_tensors([self.module.tied_weight()], source=source, group=self.groups.embedding)

    def poison(
        self, round_start: Sequence[torch.Tensor], poison: PoisonForTesting, *, seed: int
    ) -> None:
        """Rewrite this stage's local parameters as ``poison`` says (trainer/runtime/poison.py).
        The last stage's copy of a tied embedding then follows the matrix, as after an apply or
        a restore: a step that applies nothing (a warm-up run's first delayed step) trains the
        next round from the poisoned parameters, and a re-execution restores them synced."""
        poison_local(self.outer_params, round_start, poison, seed=seed)
        self.sync_tied_copy()

    def begin_step(self) -> None:
        """An outer step starts (trainer/outer's algorithms take it: what the step applies is
        recorded from here, the short overlap's mid-round apply included)."""
        begin = getattr(self.outer, "begin_step", None)
        if callable(begin):
            begin()

    def note_round_data(self, step: int, *, first_inner_step: int, inner_steps: int) -> None:
        """Tell the outer algorithm what the round trains on, for its contribution scores
        (trainer/outer's algorithms take it; the seam's protocol does not require it)."""
        note = getattr(self.outer, "note_round_data", None)
        if callable(note):
            note(step, first_inner_step=first_inner_step, inner_steps=inner_steps)

    def global_parameters(self) -> list[torch.Tensor] | None:
        """The outer algorithm's θ when it can tell (trainer/outer's algorithms can; the seam's
        protocol does not require it): under the one-step delay the local parameters are a
        look-ahead of θ, and θ is the model worth evaluating and publishing."""
        view = getattr(self.outer, "global_parameters", None)
        return list(view()) if callable(view) else None

    def evaluate(self) -> float | None:
        """Held-out loss of θ (cluster 0's pipeline). In blocking mode the local parameters
        already are θ; under the delay θ is swapped in for the evaluation and swapped back."""
        global_params = self.global_parameters() if self.overlapped else None
        if global_params is None:
            return self.runner.evaluate(self.eval_batches)
        saved = [p.detach().clone() for p in self.module.parameters()]
        with torch.no_grad():
            for param, value in zip(self.outer_params, global_params, strict=True):
                param.copy_(value)
            self.sync_tied_copy()
            loss = self.runner.evaluate(self.eval_batches)
            for param, value in zip(self.module.parameters(), saved, strict=True):
                param.copy_(value)
        return loss

    def state_files(self) -> dict[str, dict[str, torch.Tensor]]:
        """The safetensors files this process saves after an outer step
        (trainer/checkpoint_layout.py)."""
        global_params = self.global_parameters()
        files = stage_files(
            self.stage_state(self.role.cluster),
            save_local=self.overlapped,
            weights=dict(zip(self.outer_names, global_params, strict=True))
            if global_params is not None
            else None,
        )
        applied: Any = getattr(self.outer, "applied_payloads", None)  # trainer/outer's have it
        if self.role.cluster == 0 and callable(applied) and applied():
            # What this step's verdicts were reached on, for a verifier to recompute them.
            files[exchange_file(self.role.stage)] = exchange_tensors(applied())
        return files

    def restore(self, files: CheckpointFiles) -> None:
        """Take the stage's state from ``files`` (this process's share of a saved step)."""
        restore_stage(files, self.stage_state(share_owner(files, stage=self.role.stage)))
        self.sync_tied_copy()

    def stage_state(self, cluster: int) -> StageState:
        """The stage's module and optimisers, as the files of ``cluster``."""
        return StageState(
            module=self.module,
            inner=self.inner,
            outer=self.outer,
            cluster=cluster,
            stage=self.role.stage,
            stages=self.role.stages,
        )
