"""A realistic small run recorded by the real recorder
(``veritrain.record.recorder.LedgerRecorder``), for the web tests (and the e2e and
integration tests that serve it). Import it as
``from unit.web.web_fixture_run import record_demo_run``.

Nothing here writes an entry by hand: the recorder builds every payload from its typed
records (records/), stores real checkpoint files (a tiny model's weights in Hugging Face
shards, optimizer state, trainer state), the data shards and manifest, and signs and attests
each step with its own keys. What is made up is the training: the weights move by seeded noise
instead of gradient steps, and the contribution payloads are a few made-up bytes, so
``veritrain verify`` on this run is not meaningful (tests that need a trained run use
``e2e.recorded_runs``).
"""

from __future__ import annotations

import hashlib
import math
import random
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import torch
from built_once import built_once

from ledger.db import create_engine
from ledger.service import Ledger
from records import DataManifest, Shard, Source
from records.commitments import (
    FINGERPRINT_DIMS,
    InnerCommitments,
    InnerStepCommitment,
    ParameterCommitment,
)
from records.data_manifest import TokenizerIdentity
from records.outer_step import ClusterVerdict, ContributionScore, Quorum
from storage.checkpoint_files import Manifest, read_manifest
from storage.factory import open_store
from trainer.api import assignment_rule, config_digest
from trainer.checkpoint_layout import TRAINER_STATE, inner_file
from trainer.config import GenerationConfig, TrainConfig
from trainer.data.shards import DirectoryShardSource, shard_file_name
from trainer.model import TIED_HEAD, CausalLM, ModelConfig, model_summary
from trainer.outer.config import OuterConfig
from trainer.recorder import (
    AnomalyFlag,
    AppliedRound,
    AttestationRequest,
    ClusterEvidence,
    ContributionDigest,
    OuterStepReport,
    ProcessInfo,
    Publication,
    Recorder,
    RunIdentity,
    RunStart,
    RunSummary,
)
from trainer.runtime.topology import Topology
from veritrain.record.recorder import LedgerRecorderFactory
from web.settings import AppSettings

ORIGIN = "test.veritrain.local"
MODEL = ModelConfig(
    vocab_size=256,
    context=32,
    num_hidden_layers=2,
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=2,
    num_key_value_heads=2,
)
TOKENS_PER_SHARD = 4096
CLUSTERS = 2
INNER_STEPS = 8
SOURCE_TEXT = b"fixture corpus text"


@dataclass(frozen=True)
class CheckpointFacts:
    """What the fixture stored for one step's checkpoint."""

    step: int
    manifest_object: str
    manifest_root: str
    files: dict[str, str]
    """File name -> SHA-256."""


@dataclass(frozen=True)
class DemoRun:
    """A recorded run and where it lives."""

    run_id: str
    database_url: str
    store_url: str
    origin: str
    log_vkey: str
    steps: int
    """Outer steps recorded: ``0 .. steps - 1`` (0-based, docs/records.md)."""
    finished: bool
    checkpoints: dict[int, CheckpointFacts]
    """Outer step -> the checkpoint written at its end."""
    data_manifest_object: str
    shard_digests: list[str]
    key_dir: Path = Path()
    metric_keys: list[str] = field(default_factory=list)

    @property
    def last_step(self) -> int:
        return self.steps - 1


def settings_for(run: DemoRun, *, presign: bool = True) -> AppSettings:
    """The web app's settings that serve ``run`` (S3 downloads presigned unless ``presign``
    is False)."""
    return AppSettings(
        database_url=run.database_url,
        store_url=run.store_url,
        origin=run.origin,
        s3_presign_downloads=presign,
    )


@dataclass(frozen=True)
class ServedRun:
    """A recorded run and the base URL of a server serving it."""

    url: str
    """e.g. ``http://127.0.0.1:41234`` (no trailing slash)."""
    run: DemoRun


def record_demo_run(
    database_url: str,
    store_url: str,
    *,
    run_id: str = "demo-1",
    steps: int = 4,
    finish: bool = True,
    seed: int = 1234,
    origin: str = ORIGIN,
    key_dir: Path | None = None,
) -> DemoRun:
    """Record ``run_id`` with ``steps`` outer steps (and a ``run.final`` when ``finish``) into
    the ledger at ``database_url`` and the store at ``store_url``, through the real recorder."""
    rng = random.Random(seed)
    config = TrainConfig(
        run_id=run_id,
        preset="fixture",
        method="dilocox",
        model=MODEL,
        clusters=CLUSTERS,
        stages=1,
        outer=OuterConfig(kind="dilocox", overlap=False),
        outer_steps=steps,
        inner_steps=INNER_STEPS,
        generation=GenerationConfig(prompts=("def ", "class "), max_new_tokens=12),
        micro_batches=2,
        micro_batch_size=4,
        seed=seed,
    )
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        keys = key_dir or work / "keys"
        factory = LedgerRecorderFactory(
            database_url=database_url,
            store_url=store_url,
            key_dir=keys,
            cluster_key_root=work / "cluster-keys",
            origin=origin,
        )
        # One recorder per cluster, as each cluster's own process has (cluster 0's also
        # coordinates).
        recorders = [
            factory(
                ProcessInfo(
                    rank=c, world_size=CLUSTERS, cluster=c, stage=0, clusters=CLUSTERS, stages=1
                )
            )
            for c in range(CLUSTERS)
        ]
        recorder = recorders[0]
        identity = RunIdentity(run_id=run_id, config_digest=config_digest(config))
        enrollments = tuple(k for k in (r.enrol(identity) for r in recorders) if k is not None)
        manifest, shard_dir = _data(config, work / "shards", rng)
        recorder.begin(
            RunStart(
                run_id=run_id,
                config=config.to_dict(),
                config_digest=config_digest(config),
                topology=Topology.full(clusters=CLUSTERS, stages=1).recorded(
                    present=range(CLUSTERS), backend="gloo", device="cpu"
                ),
                model=model_summary(MODEL, 1),
                data_manifest=manifest,
                shard_source=DirectoryShardSource(shard_dir),
                seed=seed,
                resumed_from_step=None,
                enrollments=enrollments,
            )
        )
        model = CausalLM(MODEL, seed=seed)
        rule = assignment_rule(config, manifest)
        loss = 5.6
        for step in range(steps):
            _perturb(model, step)
            loss = loss * 0.93 + rng.uniform(-0.02, 0.02)
            files = recorder.save_state(step, *_state_files(model, step))
            record = OuterStepReport(
                step=step,
                inner_steps=INNER_STEPS,
                method="dilocox",
                metrics=_metrics(loss, step, rng),
                data_ranges=[
                    rule.data_range(c, step * INNER_STEPS, INNER_STEPS) for c in range(CLUSTERS)
                ],
                contribution_digests=_contributions(run_id, step),
                applied=[_applied(run_id, step)],
                anomalies=list(_applied(run_id, step).anomalies),
                files=files,
                quorum=Quorum(id=1, clusters=tuple(range(CLUSTERS)), joined=(), left=()),
            )
            request = recorder.prepare_outer_step(record)
            evidence = [
                _evidence(r, request, own, _commitments(run_id, step, own.cluster))
                for r, own in zip(recorders, _contributions(run_id, step), strict=True)
            ]
            recorder.record_outer_step(
                replace(record, evidence=tuple(e for e in evidence if e is not None))
            )
        if finish:
            recorder.end(
                RunSummary(run_id=run_id, steps=steps, tokens=0, final_metrics={}, wall_seconds=1.0)
            )
        for each in recorders:
            each.close()
    return _facts(
        run_id,
        database_url,
        store_url,
        origin,
        keys,
        steps=steps,
        finished=finish,
        manifest=manifest,
    )


def record_demo_run_once(factory: pytest.TempPathFactory) -> DemoRun:
    """The default demo run (SQLite + local store), recorded once per test session and shared
    by every test and xdist worker that asks (tests/built_once.py): only read it."""
    return built_once(
        factory,
        "demo-run",
        lambda root: record_demo_run(
            f"sqlite:///{root / 'ledger.db'}", f"file://{root / 'objects'}"
        ),
    )


def _data(config: TrainConfig, directory: Path, rng: random.Random) -> tuple[DataManifest, Path]:
    """Four shards of little-endian uint16 tokens (the last held out), with the run's rule."""
    directory.mkdir(parents=True)
    shards = []
    for index in range(4):
        tokens = bytes(b for _ in range(TOKENS_PER_SHARD) for b in (rng.randrange(256), 0))
        digest = hashlib.sha256(tokens).hexdigest()
        (directory / shard_file_name(digest)).write_bytes(tokens)
        shards.append(Shard(index=index, sha256=digest, tokens=TOKENS_PER_SHARD))
    manifest = DataManifest(
        corpus={"kind": "files", "selection": "fixture"},
        sources=(
            Source(
                uri="file://corpus/fixture.txt",
                sha256=hashlib.sha256(SOURCE_TEXT).hexdigest(),
                bytes=len(SOURCE_TEXT),
                license="CC0-1.0",
            ),
        ),
        tokenizer=TokenizerIdentity(kind="bytes", vocab_size=256, end_of_text=0),
        dtype="uint16",
        shard_tokens=TOKENS_PER_SHARD,
        shards=tuple(shards),
        eval_shards=(3,),
        dropped_tokens=0,
    )
    return manifest.with_assignment(assignment_rule(config, manifest).to_dict()), directory


def _state_files(
    model: CausalLM, step: int
) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, Any]]:
    """The model in two Hugging Face shards (so the index has several files), one optimizer
    file and the trainer state."""
    # A tied output projection is the embedding: stored once, as the trainer stores it.
    state = {k: v.detach().clone() for k, v in model.named_parameters() if k != TIED_HEAD}
    names = sorted(state)
    half = len(names) // 2
    tensors = {
        "model-00001-of-00002.safetensors": {n: state[n] for n in names[:half]},
        "model-00002-of-00002.safetensors": {n: state[n] for n in names[half:]},
        inner_file(0, 0): {f"{n}.exp_avg": torch.zeros_like(state[n]) for n in names[:4]},
    }
    return tensors, {TRAINER_STATE: {"step": step, "data_cursor": (step + 1) * INNER_STEPS}}


def _payload(run_id: str, round_: int, cluster: int) -> bytes:
    """Cluster ``cluster``'s made-up contribution payload of round ``round_``."""
    return f"{run_id}/{round_}/{cluster}".encode()


def _contributions(run_id: str, round_: int) -> list[ContributionDigest]:
    return [
        ContributionDigest(
            cluster=c, stage=0, digest=hashlib.sha256(_payload(run_id, round_, c)).hexdigest()
        )
        for c in range(CLUSTERS)
    ]


def _evidence(
    recorder: Recorder,
    request: AttestationRequest | None,
    own: ContributionDigest,
    commitments: InnerCommitments,
) -> ClusterEvidence:
    """One cluster's evidence of a step, gathered as the trainer gathers it: the contribution
    signed when it was published (trainer/runtime/publishing.py), the quote when the
    coordinator asks (trainer/runtime/step_reporting.py)."""
    payload = _payload(commitments.run_id, commitments.step, own.cluster)
    signed = recorder.publish_contribution(
        Publication(step=commitments.step, own=own, payload=payload, commitments=commitments)
    )
    attested = recorder.attest(request) if request is not None else None
    return ClusterEvidence(
        cluster=own.cluster,
        stage=own.stage,
        contribution=signed,
        quote=attested.quote if attested is not None else None,
    )


def _commitments(run_id: str, step: int, cluster: int) -> InnerCommitments:
    """Made-up per-inner-step commitments of cluster ``cluster``'s one stage (the training is
    made up too)."""
    made_up = [
        hashlib.sha256(f"{run_id}/{step}/{cluster}/{i}".encode()).hexdigest()
        for i in range(INNER_STEPS + 1)
    ]
    zeros = (0.0,) * FINGERPRINT_DIMS
    return InnerCommitments(
        run_id=run_id,
        step=step,
        cluster=cluster,
        stage=0,
        start=ParameterCommitment(digest=made_up[0], tensors={"model.embed_tokens.weight": zeros}),
        inner_steps=tuple(
            InnerStepCommitment(
                inner_step=step * INNER_STEPS + k, digest=made_up[k], fingerprint=zeros
            )
            for k in range(INNER_STEPS)
        ),
        contributed=ParameterCommitment(
            digest=made_up[-1], tensors={"model.embed_tokens.weight": zeros}
        ),
    )


def _applied(run_id: str, step: int) -> AppliedRound:
    """The step's own round, applied blocking (DiLoCo without the one-step delay)."""
    rank = 8 if step < 2 else 4
    reason = "norm 812.4 is 96x the reference 8.46 (limit 10x)"
    verdicts = [
        ClusterVerdict(
            cluster=c,
            norm=812.4 if (step, c) == (1, 1) else 8.46,
            agreement=0.8,
            previous=None,
            score=ContributionScore(held_out=-0.05 * (c + 1), own_data=-0.06 * (c + 1)),
            flags=("large_norm",) if (step, c) == (1, 1) else (),
            reason=reason if (step, c) == (1, 1) else "",
            excluded=False,
        )
        for c in range(CLUSTERS)
    ]
    flags = [
        AnomalyFlag(round=step, cluster=v.cluster, reason=v.reason, excluded=v.excluded)
        for v in verdicts
        if v.flags
    ]
    return AppliedRound(
        round=step,
        contribution_digests=_contributions(run_id, step),
        anomalies=flags,
        payload_bytes=4096 * rank,
        rank=rank,
        bits=8,
        verdicts=verdicts,
    )


def _perturb(model: CausalLM, step: int) -> None:
    generator = torch.Generator().manual_seed(step)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 1e-3)


def _metrics(loss: float, step: int, rng: random.Random) -> dict[str, float]:
    eval_loss = loss + 0.05
    rank = 8 if step < 2 else 4
    tokens = CLUSTERS * INNER_STEPS * 8 * MODEL.context
    return {
        "train_loss": round(loss, 6),
        "eval_loss": round(eval_loss, 6),
        "perplexity": round(math.exp(eval_loss), 4),
        "lr": 0.0008,
        "bytes_sent": 4096 * rank,
        "rank": rank,
        "bits": 8,
        "compute_seconds": round(1.5 + rng.random(), 3),
        "comm_seconds": round(0.1 + rng.random() / 10, 3),
        "step_tokens": tokens,
        "tokens": tokens * (step + 1),
    }


def _facts(
    run_id: str,
    database_url: str,
    store_url: str,
    origin: str,
    keys: Path,
    *,
    steps: int,
    finished: bool,
    manifest: DataManifest,
) -> DemoRun:
    """What the recorder stored, read back through the ledger (the test's expectations)."""
    engine = create_engine(database_url)
    try:
        ledger = Ledger(engine)
        entries = ledger.entries(run_id, 0, 1000)
        checkpoints: dict[int, CheckpointFacts] = {}
        with open_store(store_url) as store:
            for entry in entries:
                if entry.kind == "outer_step":
                    checkpoint = entry.payload["checkpoint"]
                    manifest_obj: Manifest = read_manifest(store, checkpoint["manifest_object"])
                    checkpoints[entry.payload["step"]] = CheckpointFacts(
                        step=entry.payload["step"],
                        manifest_object=checkpoint["manifest_object"],
                        manifest_root=checkpoint["manifest_root"],
                        files=manifest_obj.digests,
                    )
        genesis = entries[0].payload
        data = entries[1].payload
    finally:
        engine.dispose()
    return DemoRun(
        run_id=run_id,
        database_url=database_url,
        store_url=store_url,
        origin=origin,
        log_vkey=genesis["keys"]["log"],
        steps=steps,
        finished=finished,
        checkpoints=checkpoints,
        data_manifest_object=data["manifest_object"],
        shard_digests=[s.sha256 for s in manifest.shards],
        key_dir=keys,
        metric_keys=sorted(_metrics(1.0, 1, random.Random(0))),
    )
