"""The compute of one round: H inner steps through the pipeline (pipeline.py, inner.py), each
replica on its rows of the cluster's batch, then the cluster's numbers of the round gathered
over its world so every one of its processes holds the same (exchange.py, ``ClusterNumbers``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from trainer.runtime.collectives import gather_floats, ordered_sum
from trainer.runtime.data_parallel import average_gradients, replica_rows
from trainer.runtime.exchange import ClusterNumbers
from trainer.runtime.forgery import Forgery
from trainer.runtime.inner import InnerStepStats
from trainer.runtime.local_stage import LocalStage
from trainer.runtime.progress import Progress
from trainer.runtime.role import ProcessRole


@dataclass(frozen=True, kw_only=True)
class RoundCompute:
    """What this process measured over a round's inner steps."""

    losses: list[float]
    """The training loss of each inner step (the last stage measures it; empty elsewhere)."""
    last: InnerStepStats
    """The round's last inner step."""
    compute_seconds: float
    comm_seconds: float
    """In the AllReduce baseline's gradient all-reduces (0 otherwise)."""
    bytes_sent: int


class InnerRound:
    def __init__(
        self,
        stage: LocalStage,
        *,
        role: ProcessRole,
        progress: Progress,
        device: torch.device,
        forgery: Forgery | None,
    ) -> None:
        self.stage = stage
        self.role = role
        self.progress = progress
        self.device = device
        self.forgery = forgery
        """TESTS AND BENCHMARKS ONLY (forgery.py)."""

    def run(
        self,
        step: int,
        first: int,
        H: int,
        allreduce: dist.ProcessGroup | None,
        clusters: int,
        *,
        apply_after: tuple[int, Callable[[], None]] | None = None,
    ) -> RoundCompute:
        """Inner steps ``first`` .. ``first + H - 1`` (global indices: the data rule's i).
        ``apply_after = (τ, apply)``: the short overlap's ``apply()`` of the previous round after
        the round's first ``min(τ, H − 1)`` inner steps (``OuterConfig.apply_delay``); its time
        is not compute."""
        stage, role, forgery = self.stage, self.role, self.forgery
        data = stage.groups.data
        self.progress.start_step(step, H)
        losses: list[torch.Tensor] = []  # read from the device once, after the round
        comm = 0.0
        sent = 0
        last: InnerStepStats | None = None
        applied_seconds = 0.0
        apply_at = min(apply_after[0], H - 1) if apply_after is not None else None
        started = time.perf_counter()

        def apply_now(after: int) -> None:
            nonlocal applied_seconds
            if apply_after is not None and after == apply_at:
                began = time.perf_counter()
                apply_after[1]()
                applied_seconds += time.perf_counter() - began

        apply_now(0)
        for i in range(first, first + H):
            if forgery is None or not forgery.skips(role.cluster, step, i - first):
                window = (
                    i if forgery is None else forgery.window_step(role.cluster, step, i - first, i)
                )
                inputs, targets = stage.reader.train_batch(role.cluster, window)
                if data is not None:
                    inputs, targets = replica_rows(
                        inputs, targets, replica=role.replica, replicas=role.replicas
                    )
                stage.inner.zero_grad()
                loss = stage.runner.train_step(inputs, targets)
                if data is not None:
                    average_gradients(list(stage.module.parameters()), data)
                lr_scale = 1.0 if forgery is None else forgery.lr_factor(role.cluster, step)
                last = stage.inner.step(
                    i, allreduce=allreduce, clusters=clusters, lr_scale=lr_scale
                )
                comm += last.comm_seconds
                sent += last.bytes_sent
                if loss is not None:
                    losses.append(loss)
            if stage.commitments is not None:
                stage.commitments.after_inner_step(i)
            apply_now(i - first + 1)
            self.progress.advance()
        assert last is not None  # H >= 1
        # One host sync for the round's losses (float32 each, then Python floats as before).
        read = torch.stack(losses).tolist() if losses else []
        return RoundCompute(
            losses=read,
            last=last,
            compute_seconds=time.perf_counter() - started - comm - applied_seconds,
            comm_seconds=comm,
            bytes_sent=sent,
        )

    def cluster_numbers(
        self, done: RoundCompute, *, inner_steps: int, previous_comm_seconds: float
    ) -> ClusterNumbers:
        """The round's numbers of this cluster, the same on each of its processes
        (``previous_comm_seconds``: this process's communication time in the previous step)."""
        stages, replicas = self.role.stages, self.role.replicas
        mine = [
            sum(done.losses) / len(done.losses) if done.losses else math.nan,
            done.last.grad_norm,
            done.compute_seconds / inner_steps,
            previous_comm_seconds,
        ]
        everyone = gather_floats(mine, _world(), self.device)
        # Each replica's last stage measures the loss of its rows (cluster rank d * S + S - 1).
        last_stages = [everyone[d * stages + stages - 1][0] for d in range(replicas)]
        return ClusterNumbers(
            train_loss=ordered_sum(last_stages) / replicas,
            grad_norm=max(v[1] for v in everyone),
            lr=done.last.lr,
            compute_seconds_per_step=max(v[2] for v in everyone),
            comm_seconds=max(v[3] for v in everyone),
        )


def _world() -> dist.ProcessGroup:
    group = dist.group.WORLD
    assert group is not None  # the default group exists once init_process_group has run
    return group
