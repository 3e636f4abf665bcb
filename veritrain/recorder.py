"""The ledger-backed Recorder: every outer step lands in the object store and the ledger,
signed and attested (DESIGN.md §3–§5, docs/records.md).

One ``LedgerRecorder`` is built inside every training process by the picklable
:class:`LedgerRecorderFactory`:

* every process, ``save_state``: writes its own checkpoint files (safetensors / JSON, via
  ``storage.checkpoint``) and uploads them; nothing gathers the model in one process;
* the coordinator, ``begin``: creates the run (genesis), uploads the data shards and appends
  the ``data.manifest`` entry -- or, on resume, checks that the ledger's run is the one being
  continued;
* the coordinator, ``record_outer_step``: writes the Hugging Face index from the stored model
  shards' headers, stores the checkpoint manifest (which refuses to name a missing file),
  then the statement, quotes and contribution signatures, and finally appends one
  ``outer_step`` entry (the ledger signs a new tree head in the same transaction);
* the coordinator, ``end``: appends ``run.final``.

Because every object is stored before the entry that names it, and the entry is appended in
one transaction, a run killed at any moment has either recorded step t completely or not at
all; resuming from the last recorded step recomputes the rest (content-addressed puts of the
same bytes are no-ops).
"""

from __future__ import annotations

import json
import math
import os
import struct
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from attestation.canonical import canonical_digest, canonical_json
from attestation.statement import CodeDigest, DataShard
from ledger.db import create_engine, upgrade
from ledger.envelope import KIND_DATA_MANIFEST, KIND_FINAL, KIND_OUTER_STEP, MAX_BODY_BYTES
from ledger.errors import NotFoundError
from ledger.service import Ledger
from storage import ObjectStore, open_store
from storage.checkpoint import (
    INDEX_FILE,
    Manifest,
    upload_files,
    upload_manifest,
    write_files,
    write_model_index,
)
from storage.checkpoint.sharding import is_model_shard
from trainer.errors import TrainerError
from trainer.recorder import OuterStepRecord, ProcessInfo, RunStart, RunSummary
from veritrain.genesis import VerificationPolicy, genesis_payload, reference_launch_measurement
from veritrain.keyring import KeyRing
from veritrain.provenance import code_identity, dependency_identity
from veritrain.step_attestation import StepAttestor

OUTER_STEP_SCHEMA = "veritrain/outer_step/v1"
DATA_MANIFEST_SCHEMA = "veritrain/data.manifest/v1"
FINAL_SCHEMA = "veritrain/run.final/v1"
_INLINE_MANIFEST_LIMIT = MAX_BODY_BYTES // 2
"""A data manifest up to this size is copied into its entry; larger ones are summarised."""


class RecorderError(TrainerError):
    """The ledger and the run being trained disagree (e.g. resuming a different run)."""


@dataclass(frozen=True, kw_only=True)
class LedgerRecorderFactory:
    """Picklable: each spawned process rebuilds its recorder from these settings."""

    database_url: str
    store_url: str
    key_dir: Path
    origin: str
    policy: VerificationPolicy = field(default_factory=VerificationPolicy)

    def __call__(self, process: ProcessInfo) -> LedgerRecorder:
        return LedgerRecorder(self, process)


class LedgerRecorder:
    def __init__(self, settings: LedgerRecorderFactory, process: ProcessInfo) -> None:
        self._settings = settings
        self._process = process
        self._store: ObjectStore = open_store(settings.store_url)
        self._keys = KeyRing(settings.key_dir, settings.origin)
        self._ledger: Ledger | None = None
        self._run: _RunContext | None = None

    # -- every process ------------------------------------------------------------------

    def save_state(
        self,
        step: int,
        files: Mapping[str, Mapping[str, torch.Tensor]],
        json_files: Mapping[str, Mapping[str, Any]],
    ) -> Mapping[str, str]:
        with tempfile.TemporaryDirectory(prefix="veritrain-state-") as folder:
            digests = write_files(folder, tensor_files=files, json_files=json_files)
            upload_files(self._store, folder, digests)
        return digests

    def close(self) -> None:
        self._store.close()
        if self._ledger is not None:
            self._ledger.engine.dispose()

    # -- coordinator ----------------------------------------------------------------------

    def begin(self, run: RunStart) -> None:
        upgrade(self._settings.database_url)
        ledger = Ledger(
            create_engine(self._settings.database_url), origin=self._settings.origin, log_keys=self._keys
        )
        self._ledger = ledger
        code, dependencies = code_identity(), dependency_identity()
        try:
            info = ledger.get_run(run.run_id)
        except NotFoundError:
            info = None
        if info is None:
            if run.resumed_from_step is not None:
                raise RecorderError(
                    f"cannot resume run {run.run_id!r} from step {run.resumed_from_step}: the ledger has no such run"
                )
            genesis = genesis_payload(
                run, keys=self._keys, code=code, dependencies=dependencies, policy=self._settings.policy
            )
            ledger.create_run(run.run_id, genesis)
            self._enroll_keys(run.run_id, genesis["keys"])
        else:
            _check_continuation(ledger, run)
        entries = _all_entries(ledger, run.run_id)
        if not any(e.kind == KIND_DATA_MANIFEST for e in entries):
            self._record_data(run)
        steps = [e.payload for e in entries if e.kind == KIND_OUTER_STEP]
        self._run = _RunContext(
            run_id=run.run_id,
            config_digest=run.config_digest,
            shard_digests={int(s["index"]): str(s["sha256"]) for s in run.data_manifest["shards"]},
            previous_manifest_root=steps[-1]["checkpoint"]["manifest_root"] if steps else None,
            attestor=StepAttestor(
                run_id=run.run_id,
                keys=self._keys,
                store=self._store,
                clusters=int(run.topology["clusters"]),
                launch_measurement=reference_launch_measurement(code, dependencies, run.config_digest),
                code=CodeDigest(source_sha256=code.source_sha256, git_commit=code.git_commit),
                previous_statements=[s["attestation"]["statement_digest"] for s in steps],
                now=datetime.now(UTC),
            ),
        )

    def record_outer_step(self, record: OuterStepRecord) -> None:
        ledger, run = self._coordinator()
        files = dict(record.files)
        files.update(self._store_model_index(files))
        manifest = Manifest.from_digests(files)
        manifest_object = upload_manifest(self._store, manifest)

        metrics, nonfinite = _finite_metrics(record.metrics)
        head = ledger.latest_tree_head(run.run_id)
        prev_leaf = ledger.entry(run.run_id, head.size - 1).leaf_hash
        rank, bits = _compression(record)
        evidence = run.attestor.attest(
            step=record.step,
            manifest_root=manifest.root,
            previous_manifest_root=run.previous_manifest_root,
            hyperparameters={
                "method": record.method,
                "inner_steps": record.inner_steps,
                "compression": {"rank": rank, "bits": bits},
                "config_digest": run.config_digest,
            },
            data_shards=[
                DataShard(name=f"shard-{index:06d}", sha256=run.shard_digests[index])
                for index in _shards_read(record)
            ],
            metrics_digest=canonical_digest(metrics),
            nonce=head.root_hash,
            prev_leaf_hash=prev_leaf,
            contributions=record.contribution_digests,
        )
        payload = {
            "schema": OUTER_STEP_SCHEMA,
            "step": record.step,
            "inner_steps": record.inner_steps,
            "method": record.method,
            "compression": {"rank": rank, "bits": bits},
            "tokens": {"step": int(record.metrics.get("step_tokens", 0)), "total": int(record.metrics.get("tokens", 0))},
            "metrics_digest": canonical_digest(metrics),
            "nonfinite_metrics": nonfinite,
            "data_ranges": [_plain(r) for r in record.data_ranges],
            "applied": [
                {
                    "round": a.round,
                    "contribution_digests": [_plain(c) for c in a.contribution_digests],
                    "payload_bytes": a.payload_bytes,
                    "rank": a.rank,
                    "bits": a.bits,
                }
                for a in record.applied
            ],
            "anomalies": [_plain(a) for a in record.anomalies],
            "aggregate_digest": _aggregate_digest(record),
            "checkpoint": {
                "manifest_root": manifest.root,
                "manifest_object": manifest_object,
                "files": len(files),
                "previous_manifest_root": run.previous_manifest_root,
            },
            **evidence,
        }
        _pause_for_crash_tests(record.step)
        ledger.append(run.run_id, KIND_OUTER_STEP, payload, step=record.step, metrics=metrics)
        run.previous_manifest_root = manifest.root

    def end(self, summary: RunSummary) -> None:
        ledger, run = self._coordinator()
        metrics, _ = _finite_metrics(summary.final_metrics)
        ledger.append(
            run.run_id,
            KIND_FINAL,
            {
                "schema": FINAL_SCHEMA,
                "steps": summary.steps,
                "tokens": summary.tokens,
                "final_metrics": metrics,
                "last_checkpoint": {"manifest_root": run.previous_manifest_root},
            },
        )

    # -- helpers ------------------------------------------------------------------------

    def _coordinator(self) -> tuple[Ledger, _RunContext]:
        if self._ledger is None or self._run is None:
            raise RecorderError("the recorder was used before begin() (only the coordinator records steps)")
        return self._ledger, self._run

    def _enroll_keys(self, run_id: str, keys: Mapping[str, Any]) -> None:
        assert self._ledger is not None
        self._ledger.enroll_key(keys["statement"], role="statement", run_id=run_id)
        self._ledger.enroll_key(keys["platform_root"], role="platform-root", run_id=run_id)
        for cluster, vkey in enumerate(keys["attesters"]):
            self._ledger.enroll_key(vkey, role=f"attester-{cluster}", run_id=run_id)
        for cluster, vkey in enumerate(keys["clusters"]):
            self._ledger.enroll_key(vkey, role=f"cluster-{cluster}", run_id=run_id)

    def _record_data(self, run: RunStart) -> None:
        """Upload every shard, then the full manifest, then append the ``data.manifest`` entry."""
        assert self._ledger is not None
        for shard in run.data_manifest["shards"]:
            self._store.put(iter([run.shard_source.read(shard["sha256"])]), expected_sha256=shard["sha256"])
        document = canonical_json(dict(run.data_manifest))
        manifest_object = self._store.put_bytes(document)
        inline = len(document) <= _INLINE_MANIFEST_LIMIT
        summary = {k: v for k, v in run.data_manifest.items() if k not in ("sources", "shards")}
        summary["source_count"] = len(run.data_manifest["sources"])
        summary["shard_count"] = len(run.data_manifest["shards"])
        self._ledger.append(
            run.run_id,
            KIND_DATA_MANIFEST,
            {
                "schema": DATA_MANIFEST_SCHEMA,
                "manifest_object": manifest_object,
                "inline": inline,
                "manifest": dict(run.data_manifest) if inline else summary,
            },
        )

    def _store_model_index(self, files: Mapping[str, str]) -> dict[str, str]:
        """Write ``model.safetensors.index.json`` from the stored shards' own headers (tensor
        names and byte sizes), so no process ever holds the whole model."""
        shards = {name: _safetensors_sizes(self._store, digest) for name, digest in files.items() if is_model_shard(name)}
        if not shards:
            return {}
        with tempfile.TemporaryDirectory(prefix="veritrain-index-") as folder:
            digests = write_model_index(folder, shards)
            upload_files(self._store, folder, digests)
        return {INDEX_FILE: digests[INDEX_FILE]}


@dataclass
class _RunContext:
    run_id: str
    config_digest: str
    shard_digests: dict[int, str]
    previous_manifest_root: str | None
    attestor: StepAttestor


def _all_entries(ledger: Ledger, run_id: str) -> list[Any]:
    entries: list[Any] = []
    while True:
        page = ledger.entries(run_id, start=len(entries), limit=1000)
        if not page:
            return entries
        entries.extend(page)


def _check_continuation(ledger: Ledger, run: RunStart) -> None:
    """A launch may only continue the ledger's run: same configuration, right step."""
    genesis = ledger.entry(run.run_id, 0).payload
    if genesis.get("config_digest") != run.config_digest:
        raise RecorderError(
            f"run {run.run_id!r} exists with configuration {genesis.get('config_digest')}, "
            f"got {run.config_digest}: pick another run id, or resume it with `veritrain train --resume {run.run_id}`"
        )
    latest = ledger.get_run(run.run_id).latest_step
    if latest != run.resumed_from_step:
        if run.resumed_from_step is None:
            raise RecorderError(
                f"run {run.run_id!r} already recorded outer steps up to {latest}; "
                f"continue it with `veritrain train --resume {run.run_id}`"
            )
        raise RecorderError(
            f"expected to continue run {run.run_id!r} after its last recorded step {latest}, "
            f"got a state after step {run.resumed_from_step}"
        )


def _safetensors_sizes(store: ObjectStore, digest: str) -> dict[str, int]:
    """Tensor name -> byte size, from a stored safetensors file's header (8-byte little-endian
    length, then that many bytes of JSON; safetensors format spec)."""
    with store.open(digest, 0, 8) as reader:
        (length,) = struct.unpack("<Q", reader.read())
    with store.open(digest, 8, 8 + length) as reader:
        header = json.loads(reader.read())
    return {
        name: int(entry["data_offsets"][1]) - int(entry["data_offsets"][0])
        for name, entry in header.items()
        if name != "__metadata__"
    }


def _finite_metrics(metrics: Mapping[str, float]) -> tuple[dict[str, float], list[str]]:
    """RFC 8785 has no NaN or infinity: such values are left out and their names listed."""
    finite = {k: float(v) for k, v in metrics.items() if math.isfinite(float(v))}
    return finite, sorted(k for k in metrics if k not in finite)


def _compression(record: OuterStepRecord) -> tuple[int, int]:
    if not record.applied:
        return 0, 32
    last = record.applied[-1]
    return last.rank, last.bits


def _shards_read(record: OuterStepRecord) -> list[int]:
    shards: set[int] = set()
    for data_range in record.data_ranges:
        for first, last in data_range.shards:
            shards.update(range(int(first), int(last) + 1))
    return sorted(shards)


def _aggregate_digest(record: OuterStepRecord) -> str:
    """SHA-256 over the applied contribution digests in (round, cluster, stage) order: names
    exactly which payloads were combined in this step."""
    ordered = sorted(
        (a.round, c.cluster, c.stage, c.digest) for a in record.applied for c in a.contribution_digests
    )
    return canonical_digest([list(item) for item in ordered])


PAUSE_FOR_CRASH_TESTS = "VERITRAIN_TEST_PAUSE_BEFORE_APPEND"
"""``<step>:<marker file>``: after step's objects are stored and before its entry is appended,
create the marker and wait, so a test can kill the run at the worst moment. Tests only."""


def _pause_for_crash_tests(step: int) -> None:
    setting = os.environ.get(PAUSE_FOR_CRASH_TESTS)
    if not setting:
        return
    pause_step, _, marker = setting.partition(":")
    if int(pause_step) == step:
        Path(marker).touch()
        time.sleep(3600)


def _plain(value: Any) -> Any:
    """A frozen record dataclass as JSON-able data (sequences become lists)."""
    return json.loads(json.dumps(asdict(value)))
