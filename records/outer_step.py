"""``outer_step``: one outer step of a run, as its entry records it (docs/records.md).

The entry holds digests, never blobs: the checkpoint is named by its manifest root and the
manifest object, the provenance statement, quotes and contribution signatures by their
object digests. What a verifier can recompute from other signed data (data ranges, the
aggregate digest, the metrics digest, the tokens) is recorded so that it *can* be recomputed
and compared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from attestation.canonical import canonical_digest
from records.fields import Fields
from records.generations import GenerationsRef
from records.genesis import METHODS
from records.versions import OUTER_STEP

SCHEMA = OUTER_STEP.current
UNCOMPRESSED_BITS = 32
"""``compression`` of a step that applied no compressed exchange: rank 0, 32 bits."""


@dataclass(frozen=True, kw_only=True)
class Compression:
    rank: int
    bits: int

    def to_payload(self) -> dict[str, Any]:
        return {"rank": self.rank, "bits": self.bits}

    @classmethod
    def read(cls, f: Fields) -> Compression:
        value = cls(rank=f.integer("rank", minimum=0), bits=f.integer("bits", minimum=1))
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class Tokens:
    step: int
    """Tokens all clusters trained on in this step."""
    total: int
    """Tokens trained on since the start of the run."""

    def to_payload(self) -> dict[str, Any]:
        return {"step": self.step, "total": self.total}

    @classmethod
    def read(cls, f: Fields) -> Tokens:
        value = cls(step=f.integer("step", minimum=0), total=f.integer("total", minimum=0))
        f.exactly()
        if value.total < value.step:
            raise f.fail("total", f"at least the step's own tokens ({value.step})", value.total)
        return value


@dataclass(frozen=True, kw_only=True)
class DataRange:
    """What one cluster trained on in one outer step; recomputable from the data manifest's
    assignment rule (trainer/data/assignment.py)."""

    cluster: int
    first_inner_step: int
    """Global inner step (the rule's i) of the step's first inner step."""
    inner_steps: int
    sequences: int
    tokens: int
    shards: tuple[tuple[int, int], ...]
    """Shard indices read, as sorted, disjoint [first, last] runs."""

    def shard_indices(self) -> list[int]:
        """Every shard index the runs cover, in order."""
        return [i for first, last in self.shards for i in range(first, last + 1)]

    def to_payload(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "first_inner_step": self.first_inner_step,
            "inner_steps": self.inner_steps,
            "sequences": self.sequences,
            "tokens": self.tokens,
            "shards": [list(run) for run in self.shards],
        }

    @classmethod
    def read(cls, f: Fields) -> DataRange:
        runs: list[tuple[int, int]] = []
        for i, item in enumerate(f.array("shards")):
            if (
                not isinstance(item, list)
                or len(item) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in item)
                or item[0] > item[1]
                or (runs and item[0] <= runs[-1][1])
            ):
                raise f.fail(
                    f"shards[{i}]", "a sorted, disjoint [first, last] run of shard indices", item
                )
            runs.append((item[0], item[1]))
        value = cls(
            cluster=f.integer("cluster", minimum=0),
            first_inner_step=f.integer("first_inner_step", minimum=0),
            inner_steps=f.integer("inner_steps", minimum=1),
            sequences=f.integer("sequences", minimum=0),
            tokens=f.integer("tokens", minimum=0),
            shards=tuple(runs),
        )
        f.exactly()
        return value


def shards_read(data_ranges: Iterable[DataRange]) -> list[int]:
    """Every shard index any of ``data_ranges`` read, sorted: the one computation of "which
    shards a step read" (its statement lists exactly these)."""
    return sorted({i for r in data_ranges for i in r.shard_indices()})


def shard_runs(indices: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """Shard indices as sorted [first, last] runs (the form ``DataRange.shards`` records)."""
    runs: list[list[int]] = []
    for index in sorted(set(indices)):
        if runs and runs[-1][1] == index - 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return tuple((first, last) for first, last in runs)


@dataclass(frozen=True, kw_only=True)
class StageContribution:
    stage: int
    digest: str
    """SHA-256 of the payload this (cluster, stage) put on the wire."""
    signature_object: str
    """Object: the DSSE envelope of the cluster's signature over it (and over ``commitments``)."""
    commitments: str
    """Object: the stage's per-inner-step commitments for the step (records/commitments.py)."""

    def to_payload(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "digest": self.digest,
            "signature_object": self.signature_object,
            "commitments": self.commitments,
        }

    @classmethod
    def read(cls, f: Fields) -> StageContribution:
        value = cls(
            stage=f.integer("stage", minimum=0),
            digest=f.digest("digest"),
            signature_object=f.digest("signature_object"),
            commitments=f.digest("commitments"),
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class ClusterContributions:
    cluster: int
    stages: tuple[StageContribution, ...]

    def to_payload(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "stages": [s.to_payload() for s in self.stages]}

    @classmethod
    def read(cls, f: Fields) -> ClusterContributions:
        value = cls(
            cluster=f.integer("cluster", minimum=0),
            stages=f.items("stages", StageContribution.read),
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class ContributionRef:
    """One gathered payload, by (cluster, stage) and digest."""

    cluster: int
    stage: int
    digest: str

    def to_payload(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "stage": self.stage, "digest": self.digest}

    @classmethod
    def read(cls, f: Fields) -> ContributionRef:
        value = cls(
            cluster=f.integer("cluster", minimum=0),
            stage=f.integer("stage", minimum=0),
            digest=f.digest("digest"),
        )
        f.exactly()
        return value


VERDICT_FLAGS = (
    "non_finite",
    "empty",
    "large_norm",
    "small_norm",
    "direction",
    "replayed",
    "held_out",
    "own_data",
)
"""The rules a cluster's contribution can fail (trainer/outer/verdict.py, docs/outer-algorithm.md
§4): not finite; all zeros; norm far above the reference; norm well below the other clusters';
direction disagreeing with the other clusters; a payload already sent in an earlier round; applied
alone, a held-out loss gain far below the other clusters'; a gain on its own data no larger than on
held-out data."""


@dataclass(frozen=True, kw_only=True)
class ContributionScore:
    """What one cluster's decoded contribution does to the loss when it alone is applied to the
    global parameters (θ − Δ_i): the loss of that model minus the loss of θ (negative: it
    helps)."""

    held_out: float
    """On the fixed probe batch of held-out windows."""
    own_data: float
    """On windows drawn from the cluster's own assigned data for the round."""

    def to_payload(self) -> dict[str, Any]:
        return {"held_out": self.held_out, "own_data": self.own_data}

    @classmethod
    def read(cls, f: Fields) -> ContributionScore:
        value = cls(held_out=f.number("held_out"), own_data=f.number("own_data"))
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class ClusterVerdict:
    """One cluster's verdict on one round: the measures it was judged on, the rules it failed and
    whether its contribution was left out of the mean (in every pipeline stage)."""

    cluster: int
    norm: float | None
    """L2 norm of the whole decoded contribution (every stage); null when not finite."""
    agreement: float | None
    """Cosine with the mean of the other clusters' contributions; null when undefined."""
    previous: float | None
    """Cosine with the previous applied mean; null when undefined."""
    score: ContributionScore | None
    """Null when scoring is off or the contribution is not finite."""
    flags: tuple[str, ...]
    """The rules failed, in ``VERDICT_FLAGS`` order (empty: clean)."""
    reason: str
    """The failures in words, with the numbers (empty when clean)."""
    excluded: bool

    def to_payload(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "norm": self.norm,
            "agreement": self.agreement,
            "previous": self.previous,
            "score": self.score.to_payload() if self.score is not None else None,
            "flags": list(self.flags),
            "reason": self.reason,
            "excluded": self.excluded,
        }

    @classmethod
    def read(cls, f: Fields) -> ClusterVerdict:
        flags = f.strings("flags")
        for i, flag in enumerate(flags):
            if flag not in VERDICT_FLAGS:
                raise f.fail(f"flags[{i}]", f"one of {', '.join(map(repr, VERDICT_FLAGS))}", flag)
        if list(flags) != sorted(set(flags), key=VERDICT_FLAGS.index):
            raise f.fail("flags", "distinct flags in the order of VERDICT_FLAGS", list(flags))
        score = ContributionScore.read(f.obj("score")) if f.raw("score") is not None else None
        value = cls(
            cluster=f.integer("cluster", minimum=0),
            norm=f.optional_number("norm"),
            agreement=f.optional_number("agreement"),
            previous=f.optional_number("previous"),
            score=score,
            flags=flags,
            reason=f.string("reason"),
            excluded=f.boolean("excluded"),
        )
        f.exactly()
        if value.excluded and not value.flags:
            raise f.fail("excluded", "false for a contribution that failed no rule", True)
        return value


@dataclass(frozen=True, kw_only=True)
class Anomaly:
    """A flagged cluster of one applied round: a view of its ``ClusterVerdict`` (the page's and
    the progress line's "anomalies")."""

    round: int
    """The round whose exchange was flagged."""
    cluster: int
    reason: str
    excluded: bool


@dataclass(frozen=True, kw_only=True)
class AppliedExchange:
    """One round's exchange as applied in this step (the step's own round when blocking, the
    previous round under the one-step delay; the last step also applies its own)."""

    round: int
    contribution_digests: tuple[ContributionRef, ...]
    payload_bytes: int
    """Bytes one cluster put on the wire for this round, summed over stages."""
    rank: int
    bits: int
    verdicts: tuple[ClusterVerdict, ...] = ()
    """One per cluster, in cluster order, the same in every stage (empty when the checks are
    off); ``veritrain verify`` recomputes them."""

    def combined_digests(self) -> dict[tuple[int, int], str]:
        """(cluster, stage) -> digest of each payload this exchange combined (a key named twice
        keeps its last digest)."""
        return {(c.cluster, c.stage): c.digest for c in self.contribution_digests}

    def to_payload(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "contribution_digests": [c.to_payload() for c in self.contribution_digests],
            "payload_bytes": self.payload_bytes,
            "rank": self.rank,
            "bits": self.bits,
            "verdicts": [v.to_payload() for v in self.verdicts],
        }

    @classmethod
    def read(cls, f: Fields) -> AppliedExchange:
        value = cls(
            round=f.integer("round", minimum=0),
            contribution_digests=f.items("contribution_digests", ContributionRef.read),
            payload_bytes=f.integer("payload_bytes", minimum=0),
            rank=f.integer("rank", minimum=0),
            bits=f.integer("bits", minimum=1),
            verdicts=f.items("verdicts", ClusterVerdict.read),
        )
        f.exactly()
        judged = [v.cluster for v in value.verdicts]
        if judged not in ([], sorted({c.cluster for c in value.contribution_digests})):
            raise f.fail(
                "verdicts", "none, or one per contributing cluster in cluster order", judged
            )
        return value


@dataclass(frozen=True, kw_only=True)
class CheckpointRef:
    """The checkpoint written at the end of the step (docs/records.md, DESIGN.md §4)."""

    manifest_root: str
    manifest_object: str
    files: int
    previous_manifest_root: str | None
    """The checkpoint the step started from; None for step 0 (the seed fixes that state)."""
    signature_object: str
    """Object: ``model.sig``, the OpenSSF model-signing signature over the checkpoint's files,
    by the genesis' model-signing key (veritrain/model_signature.py)."""

    def to_payload(self) -> dict[str, Any]:
        return {
            "manifest_root": self.manifest_root,
            "manifest_object": self.manifest_object,
            "files": self.files,
            "previous_manifest_root": self.previous_manifest_root,
            "signature_object": self.signature_object,
        }

    @classmethod
    def read(cls, f: Fields) -> CheckpointRef:
        value = cls(
            manifest_root=f.digest("manifest_root"),
            manifest_object=f.digest("manifest_object"),
            files=f.integer("files", minimum=1),
            previous_manifest_root=f.optional_digest("previous_manifest_root"),
            signature_object=f.digest("signature_object"),
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class QuoteRef:
    cluster: int
    object: str

    def to_payload(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "object": self.object}

    @classmethod
    def read(cls, f: Fields) -> QuoteRef:
        value = cls(cluster=f.integer("cluster", minimum=0), object=f.digest("object"))
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class StepAttestation:
    statement_object: str
    """Object: the DSSE envelope (in-toto Statement v1 + SLSA provenance v1)."""
    statement_digest: str
    """SHA-256 of the DSSE payload bytes."""
    nonce: str
    """Hex root hash of the log at size = this entry's index (the quotes' freshness)."""
    quotes: tuple[QuoteRef, ...]

    def to_payload(self) -> dict[str, Any]:
        return {
            "statement_object": self.statement_object,
            "statement_digest": self.statement_digest,
            "nonce": self.nonce,
            "quotes": [q.to_payload() for q in self.quotes],
        }

    @classmethod
    def read(cls, f: Fields) -> StepAttestation:
        value = cls(
            statement_object=f.digest("statement_object"),
            statement_digest=f.digest("statement_digest"),
            nonce=f.digest("nonce"),
            quotes=f.items("quotes", QuoteRef.read),
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class Quorum:
    """The clusters that took part in the step (trainer/runtime/membership.py): the torchft
    quorum its exchange ran in, the clusters whose contributions it made, and how that set
    changed since the step before (the genesis' starting clusters, for step 0)."""

    id: int
    """torchft's quorum id (it changes whenever the quorum's members do, and after a failed
    exchange; a new lighthouse counts from 1 again)."""
    clusters: tuple[int, ...]
    """Clusters that contributed to this step, ascending: they trained on their data ranges
    and signed their payloads, and every exchange of this round combines exactly theirs."""
    joined: tuple[int, ...]
    """In ``clusters`` but not among the previous step's."""
    left: tuple[int, ...]
    """Among the previous step's clusters but not in ``clusters``."""

    def to_payload(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "clusters": list(self.clusters),
            "joined": list(self.joined),
            "left": list(self.left),
        }

    @classmethod
    def read(cls, f: Fields) -> Quorum:
        value = cls(
            id=f.integer("id", minimum=0),
            clusters=f.integers("clusters", minimum=0),
            joined=f.integers("joined", minimum=0),
            left=f.integers("left", minimum=0),
        )
        f.exactly()
        for name in ("clusters", "joined", "left"):
            members = list(getattr(value, name))
            if members != sorted(set(members)):
                raise f.fail(name, "distinct cluster indices in ascending order", members)
        if not value.clusters:
            raise f.fail("clusters", "at least one cluster", [])
        return value

    @classmethod
    def after(cls, id: int, clusters: Sequence[int], previous: Sequence[int]) -> Quorum:
        """The quorum of a step whose clusters are ``clusters``, after a step of ``previous``."""
        now, before = set(clusters), set(previous)
        return cls(
            id=id,
            clusters=tuple(sorted(now)),
            joined=tuple(sorted(now - before)),
            left=tuple(sorted(before - now)),
        )


def aggregate_digest(applied: Sequence[AppliedExchange]) -> str:
    """SHA-256 over the applied contribution digests in (round, cluster, stage) order: names
    exactly which payloads were combined in a step."""
    ordered = sorted(
        (a.round, c.cluster, c.stage, c.digest) for a in applied for c in a.contribution_digests
    )
    return canonical_digest([list(item) for item in ordered])


@dataclass(frozen=True, kw_only=True)
class OuterStep:
    """The ``outer_step`` payload."""

    step: int
    """t, 0-based."""
    inner_steps: int
    """H used in this step."""
    method: str
    compression: Compression
    """Of the last exchange applied in this step (rank 0 / 32 bits: none)."""
    tokens: Tokens
    metrics: Mapping[str, float]
    """Finite metrics only (RFC 8785 has no NaN); the names of the others are listed in
    ``nonfinite_metrics``. Also written to the ledger's metrics table."""
    nonfinite_metrics: tuple[str, ...]
    metrics_digest: str
    data_ranges: tuple[DataRange, ...]
    contributions: tuple[ClusterContributions, ...]
    """This step's own payloads, per cluster and stage (empty for AllReduce)."""
    applied: tuple[AppliedExchange, ...]
    aggregate_digest: str
    checkpoint: CheckpointRef
    generations: GenerationsRef
    """The object holding what the model said after this step (records/generations.py)."""
    attestation: StepAttestation
    quorum: Quorum
    schema: str = field(default=SCHEMA)

    def shards_read(self) -> list[int]:
        """Every shard index any cluster read in this step, sorted."""
        return shards_read(self.data_ranges)

    @property
    def anomalies(self) -> list[Anomaly]:
        """Every flagged cluster of every applied round, in (round, cluster) order."""
        return [
            Anomaly(round=a.round, cluster=v.cluster, reason=v.reason, excluded=v.excluded)
            for a in self.applied
            for v in a.verdicts
            if v.flags
        ]

    def signed_contributions(self) -> dict[tuple[int, int], str]:
        """(cluster, stage) -> digest of this step's own contributions."""
        return {(c.cluster, s.stage): s.digest for c in self.contributions for s in c.stages}

    def to_payload(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "step": self.step,
            "inner_steps": self.inner_steps,
            "method": self.method,
            "compression": self.compression.to_payload(),
            "tokens": self.tokens.to_payload(),
            "metrics": dict(self.metrics),
            "nonfinite_metrics": list(self.nonfinite_metrics),
            "metrics_digest": self.metrics_digest,
            "data_ranges": [r.to_payload() for r in self.data_ranges],
            "contributions": [c.to_payload() for c in self.contributions],
            "applied": [a.to_payload() for a in self.applied],
            "aggregate_digest": self.aggregate_digest,
            "checkpoint": self.checkpoint.to_payload(),
            "generations": self.generations.to_payload(),
            "attestation": self.attestation.to_payload(),
            "quorum": self.quorum.to_payload(),
        }

    @classmethod
    def from_payload(cls, payload: Any, *, where: str = "outer_step") -> OuterStep:
        f = Fields(payload, where=where)
        version = OUTER_STEP.version_of(f)
        value = cls(
            step=f.integer("step", minimum=0),
            inner_steps=f.integer("inner_steps", minimum=1),
            method=f.string("method", choices=METHODS),
            compression=Compression.read(f.obj("compression")),
            tokens=Tokens.read(f.obj("tokens")),
            metrics=f.numbers("metrics"),
            nonfinite_metrics=f.strings("nonfinite_metrics"),
            metrics_digest=f.digest("metrics_digest"),
            data_ranges=f.items("data_ranges", DataRange.read),
            contributions=f.items("contributions", ClusterContributions.read),
            applied=f.items("applied", AppliedExchange.read),
            aggregate_digest=f.digest("aggregate_digest"),
            checkpoint=CheckpointRef.read(f.obj("checkpoint")),
            generations=GenerationsRef.read(f.obj("generations")),
            attestation=StepAttestation.read(f.obj("attestation")),
            quorum=Quorum.read(f.obj("quorum")),
            schema=OUTER_STEP.schema(version),
        )
        f.exactly()
        return value
