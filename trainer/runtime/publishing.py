"""A process commits to its contribution before the payload goes on the wire (exchange.py):
its recorder keeps the payload where every cluster can fetch it and signs its digest, with
the stage's per-inner-step commitments, in this process; then the header goes on the run
channel. A payload the wire lost is fetched back the same way.

With D > 1 replicas per stage every replica computed the same contribution; replica 0 alone
keeps, signs and posts it, and the others wait until it has (replicas.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from records.outer_step import StageContribution
from trainer.outer.protocol import Contribution
from trainer.recorder import ContributionDigest, Publication, Recorder
from trainer.runtime.channel import RunChannel
from trainer.runtime.commitments import StageCommitments
from trainer.runtime.exchange import ClusterNumbers, ContributionHeader
from trainer.runtime.membership import post_header
from trainer.runtime.replicas import ReplicaGroup
from trainer.runtime.role import ProcessRole


class ContributionPublisher:
    def __init__(
        self,
        *,
        role: ProcessRole,
        recorder: Recorder,
        channel: RunChannel,
        commitments: StageCommitments | None,
        replicas: ReplicaGroup | None,
        payloads: Mapping[str, bytes],
    ) -> None:
        self.role = role
        self.recorder = recorder
        self.channel = channel
        self.commitments = commitments
        self.replicas = replicas if role.exchanges else None
        """Only where the replicas go on to exchange: one cluster re-executed alone stops at
        its contribution."""
        self.payloads = payloads
        """Payloads by digest that no process of a re-execution sends (WorkerSpec.payloads)."""

    def commit(
        self, step: int, contribution: Contribution, numbers: ClusterNumbers
    ) -> ContributionHeader:
        """outer_sync.py's ``Commit``: keep and sign the payload, then post its header
        (replica 0), or wait until replica 0 has (the other replicas)."""
        if self.role.follower:
            if self.replicas is not None:
                self.replicas.committed()
            return self.header(step, contribution, None, numbers)
        # The signature covers the inner steps' commitments too (records/commitments.py):
        # they are complete once the contribution is computed. A re-execution's recorder keeps
        # the payload too (``--cluster J`` included): reproduce compares it with the recorded one.
        own = ContributionDigest(
            cluster=self.role.cluster, stage=self.role.stage, digest=contribution.digest
        )
        commitments = self.commitments.step_commitments() if self.commitments is not None else None
        payload = contribution.payload.cpu().numpy().tobytes()
        signed = self.recorder.publish_contribution(
            Publication(step=step, own=own, payload=payload, commitments=commitments)
        )
        header = self.header(step, contribution, signed, numbers)
        post_header(self.channel, header)
        if self.replicas is not None:
            self.replicas.committed()  # the other replicas read the header next
        return header

    def post_numbers(self, step: int, numbers: ClusterNumbers) -> None:
        """The AllReduce baseline contributes no payload: its header carries the numbers."""
        post_header(self.channel, self.header(step, None, None, numbers))

    def header(
        self,
        step: int,
        contribution: Contribution | None,
        signed: StageContribution | None,
        numbers: ClusterNumbers,
    ) -> ContributionHeader:
        return ContributionHeader(
            round=step,
            cluster=self.role.cluster,
            stage=self.role.stage,
            digest=contribution.digest if contribution is not None else "",
            length=int(contribution.payload.numel()) if contribution is not None else 0,
            signature_object=signed.signature_object if signed is not None else None,
            commitments_object=signed.commitments if signed is not None else None,
            stats=dict(contribution.stats) if contribution is not None else {},
            numbers=numbers,
            segments=list(contribution.segments) if contribution is not None else [],
        )

    def fetch(self, digest: str) -> bytes | None:
        """outer_sync.py's ``PayloadFetch``: a payload by digest, from the re-execution's own
        or from the recorder."""
        kept = self.payloads.get(digest)
        return kept if kept is not None else self.recorder.fetch_contribution(digest)
