"""The end of an outer step: reports, attestation, the record.

Every process gathers its report (``RankReport``: files saved, seconds, exchanges applied) to
its cluster's stage 0 over the cluster's world. A cluster's speaker posts its cluster's
reports on the run channel and quotes for the step when the coordinator asks. The coordinator
(cluster 0, stage 0) builds the report of the step from the round's headers and every report
(report.py), has the recorder prepare it, asks every contributor to quote, collects the quotes
and records the step. A contributor that stopped beating for ``RECORD_PATIENCE`` heartbeat
timeouts is not waited for any more: the step is recorded without its files and quote
(docs/records.md).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

import torch.distributed as dist

from records.outer_step import Quorum, StageContribution
from trainer.config import TrainConfig
from trainer.data.assignment import AssignmentRule
from trainer.errors import WorkerError
from trainer.recorder import ClusterEvidence, Recorder
from trainer.runtime.channel import RECORD_PATIENCE
from trainer.runtime.exchange import ContributionHeader
from trainer.runtime.membership import header_key
from trainer.runtime.messages import (
    checkpoint_message,
    evidence_from,
    evidence_message,
    report_from,
    report_message,
    request_from,
    request_message,
)
from trainer.runtime.owner_exchange import Exchange
from trainer.runtime.process_setup import Connections
from trainer.runtime.progress import Progress
from trainer.runtime.report import RankReport, build_report
from trainer.runtime.role import ProcessRole
from trainer.runtime.state import Cursor
from trainer.runtime.topology import Topology


class StepReporting:
    def __init__(
        self,
        config: TrainConfig,
        *,
        role: ProcessRole,
        topology: Topology,
        rule: AssignmentRule,
        recorder: Recorder,
        connections: Connections,
        progress: Progress,
    ) -> None:
        self.config = config
        self.role = role
        self.topology = topology
        self.rule = rule
        self.recorder = recorder
        self.channel = connections.channel
        # Patient: giving up on a contributor here records its step without its report and
        # quote, which verify refuses if the cluster was alive after all (RECORD_PATIENCE).
        self.alive = connections.alive.patient(RECORD_PATIENCE)
        self.progress = progress

    def announce(self, step: int) -> None:
        """The coordinator says which round the run has reached (clusters starting late read it)."""
        if self.role.coordinating and self.role.mode == "train":
            self.channel.put("progress", step)

    def finish(
        self,
        step: int,
        report: RankReport,
        *,
        before: Cursor,
        inner_steps: int,
        quorum_id: int,
        contributors: tuple[int, ...],
        started: float,
    ) -> dict[str, float]:
        """Every process, once its files are saved: hand ``report`` on; the coordinator records
        the step (``before``: the cursor the step started from) and returns its metrics."""
        first = self.role.speaks_for_cluster
        gathered: list[RankReport | None] = [None] * self.topology.per_cluster if first else []
        dist.gather_object(report, gathered if first else None, dst=0)
        if not first:
            return {}
        # Replica 0's processes report the cluster (the other replicas hold the same state).
        mine = [r for r in gathered[: self.role.stages] if r is not None]
        if not self.role.coordinating:
            self._answer(step, mine)
            self.role.say(
                f"step {step}/{self.config.outer_steps - 1} contributed (quorum "
                f"{quorum_id}: clusters {','.join(map(str, contributors))})"
            )
            return {}
        others = [c for c in contributors if c != self.role.cluster]
        arrived = self.channel.wait_all(
            {c: f"step/{step}/reports/{c}" for c in others}, alive=self.alive
        )
        reports = mine + [report_from(m) for c in sorted(arrived) for m in arrived[c]]
        headers = self._round_headers(step, contributors)
        previous = before.clusters or tuple(range(self.config.clusters))
        step_report = build_report(
            step=step,
            inner_steps=inner_steps,
            method=self.config.method,
            first_inner_step=before.inner_steps_done,
            tokens_before=before.tokens,
            rule=self.rule,
            quorum=Quorum.after(quorum_id, contributors, previous),
            headers=headers,
            reports=reports,
            wall_seconds=time.perf_counter() - started,
            data_parallel=self.role.replicas,
            owner_reduce=self.config.outer.owner_reduce,
        )
        request = self.recorder.prepare_outer_step(step_report)
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
        own = self.recorder.attest(request) if request is not None else None
        if own is not None:
            evidence.append(own)
        answered = self.channel.wait_all(
            {c: f"step/{step}/evidence/{c}" for c in arrived}, alive=self.alive
        )
        evidence += [evidence_from(m) for c in sorted(answered) for m in answered[c]]
        gone = tuple(c for c in others if c not in answered)
        step_report = replace(step_report, evidence=tuple(evidence), gone=gone)
        self.recorder.record_outer_step(step_report)
        if self.role.mode == "train":
            self.channel.put(
                f"recorded/{step}",
                {"checkpoint": checkpoint_message(self.recorder.recorded_checkpoint(step))},
            )
        self.progress.finish_step(step_report)
        return dict(step_report.metrics)

    def _answer(self, step: int, reports: list[RankReport]) -> None:
        """A cluster other than the coordinator's: post its reports, then quote for the step."""
        cluster = self.role.cluster
        self.channel.put(f"step/{step}/reports/{cluster}", [report_message(r) for r in reports])
        message = self.channel.wait(
            f"step/{step}/request",
            writer_alive=lambda: self.alive(0),
            what=f"the coordinator's request for step {step}",
        )
        request = request_from(message)
        evidence = self.recorder.attest(request) if request is not None else None
        self.channel.put(
            f"step/{step}/evidence/{cluster}", [evidence_message(evidence)] if evidence else []
        )

    def _round_headers(
        self, step: int, contributors: Sequence[int]
    ) -> dict[tuple[int, int], ContributionHeader]:
        """Every stage's header of every contributor of round ``step``."""
        stages = self.role.stages
        keys = {}
        for cluster in contributors:
            for stage in range(stages):
                keys[cluster * stages + stage] = header_key(step, cluster, stage)
        got = self.channel.wait_all(keys, alive=lambda slot: self.alive(slot // stages))
        return {
            divmod(slot, stages): ContributionHeader.from_message(message)
            for slot, message in sorted(got.items())
        }

    def pending_digests(self, pending: Exchange | None) -> tuple[tuple[int, int, str], ...]:
        """(cluster, stage, digest) of the round in flight, every stage (the coordinator saves
        them)."""
        if pending is None:
            return ()
        digests = []
        for cluster in pending.contributors:
            for stage in range(self.role.stages):
                message = self.channel.get(header_key(pending.round, cluster, stage))
                if message is None:
                    raise WorkerError(
                        f"round {pending.round}: no header of cluster "
                        f"{cluster} stage {stage} on the channel"
                    )
                digests.append((cluster, stage, ContributionHeader.from_message(message).digest))
        return tuple(digests)
