"""A realistic small run recorded directly with ``ledger.service.Ledger`` and ``storage``,
following docs/records.md, for the web tests (and the e2e and integration tests that serve
it). Import it as ``from unit.web.web_fixture_run import record_demo_run``.

It stands in for the recorder (``veritrain/recorder.py``), which is not finished: entries
and objects have the documented shapes and every object a payload names is stored (real
checkpoints of a tiny ``trainer.model.GPT`` in Hugging Face shards, real data shards, DSSE
envelopes signed with Ed25519). What it does not do is train: weights move by seeded noise
and the quotes are JSON stand-ins, so attestation checks of ``veritrain verify`` are not
meaningful on it. Tests that need a trained run switch the ``demo_run`` fixture to the lead's
recorded demo; they only rely on :class:`DemoRun`'s fields.
"""

from __future__ import annotations

import hashlib
import math
import random
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import torch
from unit.storage.checkpoint_round_trip import upload_checkpoint, write_checkpoint

from attestation.canonical import canonical_json
from attestation.dsse import sign_envelope
from attestation.keys import SigningKey
from ledger.db import create_engine, upgrade
from ledger.keyring import InMemoryLogKeys
from ledger.service import Ledger
from storage import ObjectStore, open_store
from trainer.model import GPT, ModelConfig

ORIGIN = "test.veritrain.local"
MODEL = ModelConfig(vocab_size=256, context=32, n_layer=2, n_head=2, d_model=32)
TOKENS_PER_SHARD = 4096
CLUSTERS = 2
IN_TOTO = "application/vnd.in-toto+json"


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
    metric_keys: list[str] = field(default_factory=list)

    @property
    def last_step(self) -> int:
        return self.steps - 1


@dataclass(frozen=True)
class ServedRun:
    """A recorded run and the base URL of a server serving it."""

    url: str
    """e.g. ``http://127.0.0.1:41234`` (no trailing slash)."""
    run: DemoRun


class _Clock:
    """Distinct, predictable timestamps: one minute per reading."""

    def __init__(self) -> None:
        self._now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self._now += timedelta(minutes=1)
        return self._now


def record_demo_run(
    database_url: str,
    store_url: str,
    *,
    run_id: str = "demo-1",
    steps: int = 4,
    finish: bool = True,
    seed: int = 1234,
    origin: str = ORIGIN,
) -> DemoRun:
    """Record ``run_id`` with ``steps`` outer steps (and a ``run.final`` when ``finish``)
    into the ledger at ``database_url`` (migrated here) and the store at ``store_url``."""
    upgrade(database_url)
    engine = create_engine(database_url)
    ledger = Ledger(engine, origin=origin, log_keys=InMemoryLogKeys(), clock=_Clock())
    rng = random.Random(seed)
    try:
        with open_store(store_url) as store, tempfile.TemporaryDirectory() as scratch:
            work = Path(scratch)
            keys = _keys(origin, run_id)
            model = GPT(MODEL, seed=seed)
            checkpoints: dict[int, CheckpointFacts] = {}
            shards, data_object, data_manifest = _data(store, rng)
            ledger.create_run(run_id, _genesis(ledger, run_id, keys, seed))
            ledger.append(run_id, "data.manifest", {
                "schema": "veritrain/data.manifest/v1",
                "manifest_object": data_object,
                "inline": True,
                "manifest": data_manifest,
            })
            loss = 5.6
            for step in range(steps):
                _perturb(model, step)
                checkpoints[step] = _checkpoint(store, work, model, step=step)
                loss = loss * 0.93 + rng.uniform(-0.02, 0.02)
                metrics = _metrics(loss, step, rng)
                # The nonce is the log's root at size = this entry's index (docs/records.md).
                nonce = ledger.latest_tree_head(run_id).root_hash.hex()
                payload = _outer_step(store, keys, run_id, step, metrics, checkpoints, nonce)
                ledger.append(run_id, "outer_step", payload, step=step, metrics=metrics)
            if finish:
                ledger.append(run_id, "run.final", {
                    "schema": "veritrain/run.final/v1",
                    "steps": steps,
                    "tokens": steps * 2 * TOKENS_PER_SHARD,
                    "final_metrics": {"train_loss": round(loss, 6)},
                    "last_checkpoint": {"manifest_root": checkpoints[steps - 1].manifest_root},
                })
            log_vkey = ledger.log_public_key(run_id).vkey
    finally:
        engine.dispose()
    return DemoRun(
        run_id=run_id,
        database_url=database_url,
        store_url=store_url,
        origin=origin,
        log_vkey=log_vkey,
        steps=steps,
        finished=finish,
        checkpoints=checkpoints,
        data_manifest_object=data_object,
        shard_digests=shards,
        metric_keys=sorted(_metrics(1.0, 1, random.Random(0))),
    )


def _keys(origin: str, run_id: str) -> dict[str, Any]:
    return {
        "statement": SigningKey.generate(f"{origin}/runs/{run_id}/statements"),
        "platform": SigningKey.generate(f"{origin}/platform"),
        "attesters": [SigningKey.generate(f"{origin}/runs/{run_id}/attester-{j}") for j in range(CLUSTERS)],
        "clusters": [SigningKey.generate(f"{origin}/runs/{run_id}/cluster-{j}") for j in range(CLUSTERS)],
    }


def _genesis(ledger: Ledger, run_id: str, keys: dict[str, Any], seed: int) -> dict[str, Any]:
    config = {"preset": "fixture", "model": dict(MODEL.__dict__), "outer_lr": 0.7, "outer_momentum": 0.9, "inner_steps": 8}
    config_digest = hashlib.sha256(canonical_json(config)).hexdigest()
    code = hashlib.sha256(b"fixture source tree").hexdigest()
    deps = hashlib.sha256(b"fixture dependencies").hexdigest()
    return {
        "schema": "veritrain/run.genesis/v1",
        "run_id": run_id,
        "method": "dilocox",
        "model": {**MODEL.__dict__, "parameter_count": sum(p.numel() for p in GPT(MODEL).parameters()), "stage_blocks": [[0, 1]]},
        "hyperparameters": config,
        "config_digest": config_digest,
        "topology": {"clusters": CLUSTERS, "stages": 1, "world_size": CLUSTERS, "backend": "gloo"},
        "seed": seed,
        "code": {"source_sha256": code, "git_commit": "0" * 40, "git_dirty": False, "files": 1},
        "dependencies": {"sha256": deps, "python": "CPython 3.11", "torch": torch.__version__, "distributions": 1},
        "keys": {
            "log": ledger.log_public_key(run_id).vkey,
            "statement": keys["statement"].public.vkey,
            "platform_root": keys["platform"].public.vkey,
            "attesters": [k.public.vkey for k in keys["attesters"]],
            "clusters": [k.public.vkey for k in keys["clusters"]],
        },
        "tee": {
            "type": "software", "svn": 1, "minimum_svn": 1,
            "launch_measurement": hashlib.sha384(code.encode() + deps.encode()).hexdigest(),
            "reference": {"code_digest": code, "dependency_digest": deps, "config_digest": config_digest},
        },
        "verification_policy": {
            "mode": "bitwise",
            "hardware": {"device": "cpu", "machine": "x86_64", "torch": torch.__version__},
            "fallback": {"metric": "eval_loss", "delta": 0.001},
        },
    }


def _data(store: ObjectStore, rng: random.Random) -> tuple[list[str], str, dict[str, Any]]:
    """Four shards of little-endian uint16 tokens and the trainer-format data manifest."""
    shards = []
    for _ in range(4):
        tokens = bytes(rng.randrange(256) for _ in range(2 * TOKENS_PER_SHARD))
        shards.append(store.put_bytes(tokens))
    source = b"fixture corpus text"
    manifest = {
        "format": "veritrain.data-manifest/v1",
        "corpus": {"kind": "files", "selection": "fixture"},
        "sources": [{"uri": "file://corpus/fixture.txt", "sha256": hashlib.sha256(source).hexdigest(), "bytes": len(source), "license": "CC0-1.0"}],
        "tokenizer": {"kind": "bytes", "vocab_size": 256, "end_of_text": 0},
        "shard_format": {"dtype": "uint16", "byte_order": "little", "header_bytes": 0, "tokens_per_shard": TOKENS_PER_SHARD, "file_name": "<sha256>.bin"},
        "shards": [{"index": i, "sha256": d, "tokens": TOKENS_PER_SHARD, "split": "eval" if i == 3 else "train"} for i, d in enumerate(shards)],
        "dropped_tokens": 0,
        "assignment": {"rule": "round-robin", "clusters": CLUSTERS},
    }
    return shards, store.put_bytes(canonical_json(manifest)), manifest


def _checkpoint(store: ObjectStore, work: Path, model: GPT, *, step: int) -> CheckpointFacts:
    directory = work / f"step-{step:06d}"
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    optimizer = {f"{k}.exp_avg": torch.zeros_like(v) for k, v in list(state.items())[:4]}
    # Small shards so the Hugging Face layout has several model files and an index.
    manifest = write_checkpoint(
        directory,
        model=state,
        trainer_state={"step": step, "data_cursor": (step + 1) * 8},
        tensor_files={"inner-cluster00000-stage00000.safetensors": optimizer},
        max_shard_bytes=64 * 1024,
    )
    manifest_object = upload_checkpoint(store, directory, manifest)
    return CheckpointFacts(step=step, manifest_object=manifest_object, manifest_root=manifest.root, files=manifest.digests)


def _perturb(model: GPT, step: int) -> None:
    generator = torch.Generator().manual_seed(step)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 1e-3)


def _metrics(loss: float, step: int, rng: random.Random) -> dict[str, float]:
    eval_loss = loss + 0.05
    rank = 8 if step < 2 else 4
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
    }


def _outer_step(
    store: ObjectStore,
    keys: dict[str, Any],
    run_id: str,
    step: int,
    metrics: dict[str, float],
    checkpoints: dict[int, CheckpointFacts],
    nonce: str,
) -> dict[str, Any]:
    checkpoint = checkpoints[step]
    contributions = []
    for cluster, key in enumerate(keys["clusters"]):
        digest = hashlib.sha256(f"{run_id}/{step}/{cluster}".encode()).hexdigest()
        envelope = sign_envelope(canonical_json({"cluster": cluster, "stage": 0, "step": step, "digest": digest}), "application/vnd.veritrain.contribution+json", [key])
        stage = {"stage": 0, "digest": digest, "signature_object": store.put_bytes(envelope.to_json())}
        contributions.append({"cluster": cluster, "stages": [stage]})
    statement = canonical_json({"_type": "https://in-toto.io/Statement/v1", "subject": [{"name": f"step-{step}", "digest": {"sha256": checkpoint.manifest_root}}]})
    statement_object = store.put_bytes(sign_envelope(statement, IN_TOTO, [keys["statement"]]).to_json())
    quotes = [
        {"cluster": j, "object": store.put_bytes(canonical_json({"tee_type": "software", "cluster": j, "step": step}))}
        for j in range(CLUSTERS)
    ]
    anomalies = [{"round": step - 1, "cluster": 1, "stage": 0, "reason": "norm 812.4 is 96x the median", "excluded": False}] if step == 1 else []
    applied_digests = [{"cluster": c["cluster"], "stage": 0, "digest": c["stages"][0]["digest"]} for c in contributions]
    return {
        "schema": "veritrain/outer_step/v1",
        "step": step,
        "inner_steps": 8,
        "method": "dilocox",
        "compression": {"rank": metrics["rank"], "bits": metrics["bits"]},
        "tokens": {"step": 2 * TOKENS_PER_SHARD, "total": (step + 1) * 2 * TOKENS_PER_SHARD},
        "metrics_digest": hashlib.sha256(canonical_json(metrics)).hexdigest(),
        "nonfinite_metrics": [],
        "metrics": metrics,
        "data_ranges": [{"cluster": j, "first_inner_step": step * 8, "inner_steps": 8, "sequences": 16, "tokens": TOKENS_PER_SHARD, "shards": [[j, j + 1]]} for j in range(CLUSTERS)],
        "contributions": contributions,
        "applied": [{"round": step - 1, "contribution_digests": applied_digests, "payload_bytes": int(metrics["bytes_sent"]), "rank": metrics["rank"], "bits": metrics["bits"]}] if step > 0 else [],
        "anomalies": anomalies,
        "aggregate_digest": hashlib.sha256("".join(d["digest"] for d in applied_digests).encode()).hexdigest(),
        "checkpoint": {
            "manifest_root": checkpoint.manifest_root,
            "manifest_object": checkpoint.manifest_object,
            "files": len(checkpoint.files),
            **({"previous_manifest_root": checkpoints[step - 1].manifest_root} if step > 0 else {}),
        },
        "attestation": {
            "statement_object": statement_object,
            "statement_digest": hashlib.sha256(statement).hexdigest(),
            "nonce": nonce,
            "quotes": quotes,
        },
    }
