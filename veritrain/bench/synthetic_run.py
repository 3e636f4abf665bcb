"""A synthetic recorded run for the ledger benchmark: real appends, realistic bodies.

Each entry goes through ``ledger.service.Ledger`` exactly as the recorder writes it (one
transaction, a signed tree head, metric rows); only the content is made up. An ``outer_step`` record
(records/) has the fields and sizes of docs/records.md for C clusters x S stages -- data ranges,
per-(cluster, stage) contribution digests, the applied round, checkpoint and attestation digests --
and about twenty metrics, so a body is a few kilobytes like a real one. Nothing refers to stored
objects: the benchmark times the log, not the object store.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from ledger.service import Ledger
from records import (
    KIND_DATA_MANIFEST,
    KIND_OUTER_STEP,
    DataManifest,
    DataManifestEntry,
    Genesis,
    OuterStep,
    Shard,
)
from records.data_manifest import TokenizerIdentity
from records.generations import GenerationsRef
from records.genesis import (
    ClusterKeys,
    CodeIdentity,
    DependencyIdentity,
    DeterministicFlags,
    HardwareClass,
    ModelSummary,
    ReferenceDigests,
    RunKeys,
    TeeReference,
    Tolerance,
    Topology,
    VerificationPolicy,
)
from records.outer_step import (
    AppliedExchange,
    CheckpointRef,
    ClusterContributions,
    Compression,
    ContributionRef,
    DataRange,
    Quorum,
    QuoteRef,
    StageContribution,
    StepAttestation,
    Tokens,
    aggregate_digest,
)
from trainer.runtime.topology import RANK_RULE
from veritrain.rules import WRITTEN


@dataclass(frozen=True)
class SyntheticRun:
    run_id: str
    log_vkey: str
    """The run's log key (C2SP vkey), as its genesis names it."""
    entries: int
    """Entries in the log: genesis, data manifest and the outer steps."""
    outer_steps: int
    append_seconds: float
    """Wall time of the outer-step appends alone."""


def build_synthetic_run(
    ledger: Ledger,
    run_id: str,
    *,
    outer_steps: int,
    clusters: int = 2,
    stages: int = 2,
    progress: Callable[[int], None] | None = None,
) -> SyntheticRun:
    """Create ``run_id`` and append ``outer_steps`` outer-step entries to it."""
    vkey = ledger.log_public_key(run_id).vkey
    ledger.create_run(run_id, _genesis(run_id, vkey, clusters=clusters, stages=stages).to_payload())
    ledger.append(run_id, KIND_DATA_MANIFEST, _data_manifest(run_id).to_payload())
    started = time.perf_counter()
    for step in range(outer_steps):
        record = outer_step_record(run_id, step, clusters=clusters, stages=stages)
        ledger.append(
            run_id, KIND_OUTER_STEP, record.to_payload(), step=step, metrics=dict(record.metrics)
        )
        if progress is not None:
            progress(step + 1)
    seconds = time.perf_counter() - started
    return SyntheticRun(
        run_id=run_id,
        log_vkey=vkey,
        entries=outer_steps + 2,
        outer_steps=outer_steps,
        append_seconds=seconds,
    )


def outer_step_record(run_id: str, step: int, *, clusters: int, stages: int) -> OuterStep:
    """Outer step ``step``, shaped like the recorder's (docs/records.md); digests made up."""
    H, sequences, context = 20, 8, 64
    tokens = clusters * H * sequences * context
    loss = 2.0 + 3.0 * math.exp(-step / 50)
    metrics = {
        "train_loss": loss + 0.05,
        "eval_loss": loss,
        "perplexity": math.exp(loss),
        "lr": 3e-3 * (0.1 + 0.9 * math.exp(-step / 2000)),
        "grad_norm": 0.5 + 0.1 * math.sin(step),
        "tokens": float(tokens * (step + 1)),
        "step_tokens": float(tokens),
        "compute_seconds": 0.8 + 0.01 * (step % 7),
        "comm_seconds": 0.12,
        "exposed_comm_seconds": 0.0,
        "wall_seconds": 0.95,
        "bytes_sent": 13_512.0,
        "bytes_sent_all_clusters": 27_024.0,
        "pseudo_gradient_norm": 0.3,
        "rank": 4.0,
        "bits": 8.0,
        "mean_pseudo_gradient_norm": 0.25,
        "outer_step_norm": 0.2,
        "global_param_norm": 40.0 + step * 1e-3,
        "included_clusters": float(clusters),
    }
    round_ = max(step - 1, 0)
    applied = (
        AppliedExchange(
            round=round_,
            contribution_digests=tuple(
                ContributionRef(
                    cluster=c, stage=s, digest=_digest(run_id, f"contribution/{round_}/{c}/{s}")
                )
                for c in range(clusters)
                for s in range(stages)
            ),
            payload_bytes=13_512,
            rank=4,
            bits=8,
        ),
    )
    return OuterStep(
        step=step,
        inner_steps=H,
        method="dilocox",
        compression=Compression(rank=4, bits=8),
        tokens=Tokens(step=tokens, total=tokens * (step + 1)),
        metrics=metrics,
        nonfinite_metrics=(),
        metrics_digest=_digest(run_id, f"metrics/{step}"),
        data_ranges=tuple(
            DataRange(
                cluster=c,
                first_inner_step=step * H,
                inner_steps=H,
                sequences=H * sequences,
                tokens=H * sequences * context,
                shards=((c * 3 + step % 5, c * 3 + step % 5 + 2),),
            )
            for c in range(clusters)
        ),
        contributions=tuple(
            ClusterContributions(
                cluster=c,
                stages=tuple(
                    StageContribution(
                        stage=s,
                        digest=_digest(run_id, f"contribution/{step}/{c}/{s}"),
                        signature_object=_digest(run_id, f"signature/{step}/{c}/{s}"),
                        commitments=_digest(run_id, f"commitments/{step}/{c}/{s}"),
                    )
                    for s in range(stages)
                ),
            )
            for c in range(clusters)
        ),
        applied=applied,
        aggregate_digest=aggregate_digest(applied),
        checkpoint=CheckpointRef(
            manifest_root=_digest(run_id, f"root/{step}"),
            manifest_object=_digest(run_id, f"manifest/{step}"),
            files=2 * clusters * stages + 3,
            previous_manifest_root=_digest(run_id, f"root/{step - 1}") if step else None,
            signature_object=_digest(run_id, f"model-signature/{step}"),
        ),
        generations=GenerationsRef(object=_digest(run_id, f"generations/{step}")),
        attestation=StepAttestation(
            statement_object=_digest(run_id, f"statement/{step}"),
            statement_digest=_digest(run_id, f"statement-digest/{step}"),
            nonce=_digest(run_id, f"nonce/{step}"),
            quotes=tuple(
                QuoteRef(cluster=c, object=_digest(run_id, f"quote/{step}/{c}"))
                for c in range(clusters)
            ),
        ),
        quorum=Quorum(id=1, clusters=tuple(range(clusters)), joined=(), left=()),
    )


def _genesis(run_id: str, vkey: str, *, clusters: int, stages: int) -> Genesis:
    made_up = _digest(run_id, "genesis")
    return Genesis(
        run_id=run_id,
        method="dilocox",
        model=ModelSummary(
            shape={"note": "synthetic run written by veritrain bench ledger"},
            parameter_count=1,
            stage_blocks=((0,),) * stages,
        ),
        hyperparameters={},
        config_digest=made_up,
        topology=Topology(
            clusters=clusters,
            stages=stages,
            world_size=clusters * stages,
            backend="gloo",
            device="cpu",
            rank=RANK_RULE,
            present=tuple(range(clusters)),
        ),
        seed=0,
        tokenizer=TokenizerIdentity(kind="bytes", vocab_size=256, end_of_text=0),
        code=CodeIdentity(source_sha256=made_up, git_commit=None, git_dirty=False, files=0),
        dependencies=DependencyIdentity(
            sha256=made_up, python="synthetic", torch="synthetic", distributions=0
        ),
        keys=RunKeys(
            log=vkey,
            statement=vkey,
            model_signing="synthetic run: no model signatures",
            clusters=tuple(
                ClusterKeys(
                    cluster=j,
                    contribution=vkey,
                    contribution_proof="AA==",
                    attestation=vkey,
                    attestation_proof="AA==",
                    platform_root=vkey,
                )
                for j in range(clusters)
            ),
        ),
        tee=TeeReference(
            type="software",
            svn=1,
            minimum_svn=1,
            debug=False,
            launch_measurement="00" * 48,
            reference=ReferenceDigests(
                code_digest=made_up, dependency_digest=made_up, config_digest=made_up
            ),
        ),
        verification_policy=VerificationPolicy(
            mode="bitwise",
            hardware=HardwareClass(
                device="cpu",
                machine="x86_64",
                cpu_capability="AVX2",
                torch="2.13.0",
                gpu=None,
                cuda=None,
                cudnn=None,
                deterministic=DeterministicFlags(
                    algorithms=True, cudnn_benchmark=None, cublas_workspace_config=None
                ),
            ),
            fallback=Tolerance(metric="eval_loss", delta=1e-3, parameter_distance=1e-2),
        ),
        rules=WRITTEN,
    )


def _data_manifest(run_id: str) -> DataManifestEntry:
    made_up = _digest(run_id, "data")
    manifest = DataManifest(
        corpus={"kind": "synthetic"},
        sources=(),
        tokenizer=TokenizerIdentity(kind="bytes", vocab_size=256, end_of_text=0),
        dtype="uint16",
        shard_tokens=16_384,
        shards=tuple(
            Shard(index=i, sha256=_digest(run_id, f"shard/{i}"), tokens=16_384) for i in range(8)
        ),
        eval_shards=(7,),
        dropped_tokens=0,
    )
    return DataManifestEntry(manifest_object=made_up, manifest=manifest)


def _digest(run_id: str, what: str) -> str:
    return hashlib.sha256(f"{run_id}/{what}".encode()).hexdigest()
