"""The ledger-backed Recorder: every outer step lands in the object store and the ledger,
signed and attested (DESIGN.md §3–§5, docs/records.md).

One ``LedgerRecorder`` is built inside every training process by the picklable
:class:`LedgerRecorderFactory`:

* every process, ``save_state``: writes its own checkpoint files (safetensors / JSON, via
  ``storage.checkpoint_files``) and uploads them; nothing gathers the model in one process;
* the coordinator, ``begin``: creates the run (genesis), uploads the data shards and appends
  the ``data.manifest`` entry -- or, on resume, checks that the ledger's run is the one being
  continued;
* the coordinator, ``record_outer_step``: writes the Hugging Face index from the stored model
  shards' headers, stores the checkpoint manifest (which refuses to name a missing file),
  then the statement, quotes and contribution signatures, and finally appends one
  ``outer_step`` entry (the ledger signs a new tree head in the same transaction);
* the coordinator, ``end``: appends ``run.final``.

Every payload is a typed record (records/), so what is written is exactly what the verifier,
reproduce, resume and the web app read back. Because every object is stored before the entry
that names it, and the entry is appended in one transaction, a run killed at any moment has
either recorded step t completely or not at all; resuming from the last recorded step
recomputes the rest (content-addressed puts of the same bytes are no-ops).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from attestation.canonical import canonical_digest, canonical_json
from attestation.enrolment import verify_possession
from attestation.errors import AttestationError
from attestation.keys import PublicKey
from attestation.registry import DEFAULT_TEE_TYPE
from attestation.statement import CodeDigest
from ledger.db import create_engine, upgrade
from ledger.errors import NotFoundError
from ledger.service import Ledger
from records import (
    KIND_DATA_MANIFEST,
    KIND_FINAL,
    KIND_OUTER_STEP,
    DataManifestEntry,
    Genesis,
    OuterStep,
    RunFinal,
)
from records.generations import GenerationsRef
from records.genesis import ClusterKeys, CodeIdentity, DependencyIdentity
from records.outer_step import (
    UNCOMPRESSED_BITS,
    AppliedExchange,
    CheckpointRef,
    ClusterContributions,
    Compression,
    QuoteRef,
    StageContribution,
    StepAttestation,
    Tokens,
    aggregate_digest,
    shards_read,
)
from storage import ObjectStore, open_store
from storage.checkpoint_files import (
    INDEX_FILE,
    Manifest,
    read_manifest,
    upload_files,
    upload_manifest,
    write_files,
    write_model_index,
)
from storage.checkpoint_files.sharding import header_tensor_sizes, is_model_shard
from trainer.checkpoint_layout import CheckpointFiles, FileDigests, JsonFiles, TensorFiles
from trainer.config import TrainConfig
from trainer.data.tokenizer import Tokenizer, corpus_tokenizer
from trainer.recorder import (
    AttestationRequest,
    ClusterEvidence,
    FilePicker,
    OuterStepReport,
    ProcessInfo,
    Publication,
    RunIdentity,
    RunStart,
    RunSummary,
)
from veritrain.cluster_identity import SPEAKER_STAGE, ClusterKeyFolder, ClusterSigner, enrolment
from veritrain.errors import RecorderError
from veritrain.generations import generate, stored_model_state
from veritrain.hardware import hardware_differences, training_hardware
from veritrain.model_signature import sign_checkpoint
from veritrain.policy import PolicyChoice
from veritrain.record.genesis import reference_launch_measurement, run_genesis
from veritrain.record.keyring import KeyRing
from veritrain.record.provenance import code_identity, dependency_identity
from veritrain.sources.recorded_run import RecordedRun
from veritrain.step_attestation import StatementSigner, shard_dependency, statement_parameters
from veritrain.witnesses.endpoints import WitnessEndpoint
from veritrain.witnesses.push import BackgroundPusher

MAX_PAYLOAD_BYTES = 1 << 40
"""A fetched payload is read whole: what one cluster sends for one stage shard."""


@dataclass(frozen=True, kw_only=True)
class LedgerRecorderFactory:
    """Picklable: each spawned process rebuilds its recorder from these settings."""

    database_url: str
    store_url: str
    key_dir: Path
    """The coordinator's key folder (log and statement keys; never a cluster's)."""
    cluster_key_root: Path
    """Where a one-host launch keeps each cluster's own key folder: ``<root>/cluster-<j>``."""
    cluster_key_dirs: Mapping[int, Path] = field(default_factory=dict)
    """Cluster -> its key folder, where given explicitly (``veritrain train --key-dir``)."""
    origin: str
    policy: PolicyChoice = field(default_factory=PolicyChoice)
    tee_type: str = DEFAULT_TEE_TYPE
    """The TEE back-end every cluster attests with and the genesis names
    (attestation/registry.py, ``VERITRAIN_TEE_TYPE``)."""
    witnesses: tuple[WitnessEndpoint, ...] = ()
    """C2SP tlog-witnesses every new tree head is pushed to (``VERITRAIN_WITNESSES``)."""
    code: CodeIdentity = field(default_factory=code_identity)
    dependencies: DependencyIdentity = field(default_factory=dependency_identity)
    """What this host runs, measured once by the launcher that builds the factory (hashing the
    source tree and listing the installed distributions takes most of a second) rather than
    again by each of its processes: they are forked from that launcher's code and virtual
    environment."""

    def cluster_key_dir(self, cluster: int) -> Path:
        return self.cluster_key_dirs.get(cluster, self.cluster_key_root / f"cluster-{cluster}")

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
        self._signer: ClusterSigner | None = None
        self._pusher: BackgroundPusher | None = None

    # -- every process ------------------------------------------------------------------

    def enrol(self, run: RunIdentity) -> ClusterKeys | None:
        cluster = self._process.cluster
        folder = ClusterKeyFolder(self._settings.cluster_key_dir(cluster), self._settings.origin)
        self._signer = ClusterSigner(
            keys=folder,
            run_id=run.run_id,
            cluster=cluster,
            stage=self._process.stage,
            store=self._store,
            tee_type=self._settings.tee_type,
            launch_measurement=reference_launch_measurement(
                self._settings.tee_type,
                self._settings.code,
                self._settings.dependencies,
                run.config_digest,
            ),
        )
        if self._process.stage != SPEAKER_STAGE:
            return None
        # The class is measured here, in the cluster's own process, and signed with its keys:
        # the genesis' class must be it (veritrain verify, check 10).
        hardware = training_hardware(run.device, torch_version=self._settings.dependencies.torch)
        return folder.enrol(run.run_id, run.config_digest, cluster, hardware=hardware)

    def save_state(self, step: int, files: TensorFiles, json_files: JsonFiles) -> FileDigests:
        with tempfile.TemporaryDirectory(prefix="veritrain-state-") as folder:
            digests = write_files(folder, tensor_files=files, json_files=json_files)
            upload_files(self._store, folder, digests)
        return digests

    def attest(self, request: AttestationRequest) -> ClusterEvidence | None:
        """The speaker's quote of ``request`` (the contribution was signed when published)."""
        if self._signer is None:
            raise RecorderError("the recorder was asked to attest before enrol()")
        return self._signer.attest(request, None, None)

    def publish_contribution(self, published: Publication) -> StageContribution | None:
        """Store the payload (content-addressed: its digest is the contribution's), then sign it
        with the stage's per-inner-step commitments."""
        if self._signer is None:
            raise RecorderError("the recorder was asked to sign a contribution before enrol()")
        own = published.own
        if self._store.put_bytes(published.payload) != own.digest:
            raise RecorderError(
                f"cluster {own.cluster} stage {own.stage}: the payload does not hash to its digest"
            )
        return self._signer.sign(published.step, own, published.commitments)

    def fetch_contribution(self, digest: str) -> bytes | None:
        return (
            self._store.read_bytes(digest, max_size=MAX_PAYLOAD_BYTES)
            if self._store.exists(digest)
            else None
        )

    def load_checkpoint(
        self, checkpoint: CheckpointRef, names: FilePicker
    ) -> CheckpointFiles | None:
        """The chosen files of a recorded checkpoint, each verified against the manifest, whose
        root must be the recorded one."""
        from trainer.checkpoint_layout import load_checkpoint_directory

        manifest = read_manifest(self._store, checkpoint.manifest_object)
        if manifest.root != checkpoint.manifest_root:
            raise RecorderError(
                "checkpoint manifest root: expected "
                f"{checkpoint.manifest_root}, got {manifest.root}"
            )
        wanted = set(names([e.name for e in manifest.entries]))
        with tempfile.TemporaryDirectory(prefix="veritrain-join-") as folder:
            for entry in manifest.entries:
                if entry.name in wanted:
                    with (
                        self._store.open(entry.digest) as reader,
                        open(Path(folder) / entry.name, "wb") as out,
                    ):
                        for chunk in reader:  # verified against the digest as it streams
                            out.write(chunk)
            return load_checkpoint_directory(Path(folder))

    def close(self) -> None:
        if self._pusher is not None:
            self._pusher.close()  # the last heads reach the witnesses before the engine goes
        self._store.close()
        if self._ledger is not None:
            self._ledger.engine.dispose()

    # -- coordinator ----------------------------------------------------------------------

    def begin(self, run: RunStart) -> None:
        upgrade(self._settings.database_url)
        ledger = Ledger(
            create_engine(self._settings.database_url),
            origin=self._settings.origin,
            log_keys=self._keys,
        )
        self._ledger = ledger
        # Witnesses cosign every new head from a background thread: one that is down or does
        # not know the log yet never holds up training (veritrain/witnesses/push.py).
        self._pusher = BackgroundPusher(ledger, self._settings.witnesses)
        code, dependencies = self._settings.code, self._settings.dependencies
        try:
            ledger.get_run(run.run_id)
            exists = True
        except NotFoundError:
            exists = False
        enrollments = _checked_enrollments(run, every_cluster=not exists)
        if not exists:
            if run.resumed_from_step is not None:
                raise RecorderError(
                    f"cannot resume run {run.run_id!r} from step "
                    f"{run.resumed_from_step}: the ledger has no such run"
                )
            genesis = run_genesis(
                run,
                keys=self._keys,
                clusters=enrollments,
                code=code,
                dependencies=dependencies,
                policy=self._settings.policy,
                tee_type=self._settings.tee_type,
            )
            ledger.create_run(run.run_id, genesis.to_payload())
            self._enroll_keys(run.run_id, genesis)
            self._pusher.notify(run.run_id)
        recorded = _recorded(ledger, run.run_id)
        if exists:
            _check_continuation(recorded, run, enrollments)
        if recorded.data_manifest_entry is None:
            self._record_data(run)
        steps = [step for _, step in recorded.outer_steps]
        self._run = _RunContext(
            run_id=run.run_id,
            config=TrainConfig.from_dict(run.config),
            tokenizer=corpus_tokenizer(run.data_manifest.tokenizer, run.shard_source),
            config_digest=run.config_digest,
            clusters=tuple(k.cluster for k in enrollments),
            shard_digests=run.data_manifest.shard_digests,
            previous_manifest_root=steps[-1].checkpoint.manifest_root if steps else None,
            statements=[s.attestation.statement_digest for s in steps],
            signer=StatementSigner(
                run_id=run.run_id,
                key=self._keys.statement_key(run.run_id),
                store=self._store,
                code=CodeDigest(source_sha256=code.source_sha256, git_commit=code.git_commit),
            ),
        )

    def prepare_outer_step(self, report: OuterStepReport) -> AttestationRequest:
        """Store the checkpoint manifest and the signed statement; ask the clusters to attest."""
        ledger, run = self._coordinator()
        files = dict(report.files)
        files.update(self._store_model_index(files))
        manifest = Manifest.from_digests(files)
        manifest_object = upload_manifest(self._store, manifest)
        signature = sign_checkpoint(self._store, manifest, self._keys.model_signing_key(run.run_id))
        # What the statement commits to is computed once; the entry names the same.
        metrics, nonfinite = _finite_metrics(report.metrics)
        compression = _compression(report)
        statement_object, statement_digest = run.signer.sign(
            step=report.step,
            manifest_root=manifest.root,
            previous_manifest_root=run.previous_manifest_root,
            hyperparameters=statement_parameters(
                method=report.method,
                inner_steps=report.inner_steps,
                compression=compression,
                config_digest=run.config_digest,
            ),
            data_shards=[
                shard_dependency(i, run.shard_digests[i]) for i in shards_read(report.data_ranges)
            ],
            metrics_digest=canonical_digest(metrics),
        )
        said = generate(run.config, run.tokenizer, stored_model_state(self._store, files))
        generations = self._store.put_bytes(canonical_json(said.to_payload()))
        head = ledger.latest_tree_head(run.run_id)
        run.pending = _PendingStep(
            step=report.step,
            generations=GenerationsRef(object=generations),
            checkpoint=CheckpointRef(
                manifest_root=manifest.root,
                manifest_object=manifest_object,
                files=len(files),
                previous_manifest_root=run.previous_manifest_root,
                signature_object=self._store.put_bytes(signature),
            ),
            statement_object=statement_object,
            statement_digest=statement_digest,
            nonce=head.root_hash.hex(),
            metrics=metrics,
            nonfinite_metrics=tuple(nonfinite),
            compression=compression,
        )
        return AttestationRequest(
            step=report.step,
            nonce=head.root_hash.hex(),
            prev_leaf=ledger.entry(run.run_id, head.size - 1).leaf_hash.hex(),
            statement_digest=statement_digest,
            statements=(*run.statements, statement_digest),
        )

    def record_outer_step(self, report: OuterStepReport) -> None:
        """Append the step with what every cluster signed in its own processes."""
        ledger, run = self._coordinator()
        pending = run.pending
        if pending is None or pending.step != report.step:
            raise RecorderError(
                f"outer step {report.step} was recorded without being prepared first"
            )
        metrics = pending.metrics
        applied = tuple(
            AppliedExchange(
                round=a.round,
                contribution_digests=tuple(a.contribution_digests),
                payload_bytes=a.payload_bytes,
                rank=a.rank,
                bits=a.bits,
                verdicts=tuple(a.verdicts),
            )
            for a in report.applied
        )
        quoting = tuple(c for c in report.quorum.clusters if c not in report.gone)
        contributions, quotes = _collect_evidence(report, quoting)
        step = OuterStep(
            step=report.step,
            inner_steps=report.inner_steps,
            method=report.method,
            compression=pending.compression,
            tokens=Tokens(
                step=int(report.metrics.get("step_tokens", 0)),
                total=int(report.metrics.get("tokens", 0)),
            ),
            metrics=metrics,
            nonfinite_metrics=pending.nonfinite_metrics,
            metrics_digest=canonical_digest(metrics),
            data_ranges=tuple(report.data_ranges),
            contributions=contributions,
            applied=applied,
            aggregate_digest=aggregate_digest(applied),
            quorum=report.quorum,
            checkpoint=pending.checkpoint,
            generations=pending.generations,
            attestation=StepAttestation(
                statement_object=pending.statement_object,
                statement_digest=pending.statement_digest,
                nonce=pending.nonce,
                quotes=quotes,
            ),
        )
        ledger.append(
            run.run_id, KIND_OUTER_STEP, step.to_payload(), step=report.step, metrics=metrics
        )
        self._witness(run.run_id)
        run.previous_manifest_root = pending.checkpoint.manifest_root
        run.statements.append(pending.statement_digest)
        run.last_step = step
        run.pending = None

    def recorded_checkpoint(self, step: int) -> CheckpointRef | None:
        ledger, run = self._coordinator()
        if run.last_step is not None and run.last_step.step == step:
            return run.last_step.checkpoint
        return _recorded(ledger, run.run_id).step(step).checkpoint

    def end(self, summary: RunSummary) -> None:
        ledger, run = self._coordinator()
        last = run.last_step or _recorded(ledger, run.run_id).step(summary.steps - 1)
        append_final(ledger, run.run_id, last)
        self._witness(run.run_id)

    # -- helpers ------------------------------------------------------------------------

    def _witness(self, run_id: str) -> None:
        if self._pusher is not None:
            self._pusher.notify(run_id)

    def _coordinator(self) -> tuple[Ledger, _RunContext]:
        if self._ledger is None or self._run is None:
            raise RecorderError(
                "the recorder was used before begin() (only the coordinator records steps)"
            )
        return self._ledger, self._run

    def _enroll_keys(self, run_id: str, genesis: Genesis) -> None:
        assert self._ledger is not None
        keys = genesis.keys
        self._ledger.enroll_key(keys.statement, role="statement", run_id=run_id)
        for cluster in keys.clusters:
            j = cluster.cluster
            self._ledger.enroll_key(
                cluster.contribution, role=f"cluster-{j}-contribution", run_id=run_id
            )
            self._ledger.enroll_key(
                cluster.attestation, role=f"cluster-{j}-attestation", run_id=run_id
            )
            self._ledger.enroll_key(
                cluster.platform_root, role=f"cluster-{j}-platform-root", run_id=run_id
            )

    def _record_data(self, run: RunStart) -> None:
        """Upload every shard, then the full manifest, then append the ``data.manifest`` entry."""
        assert self._ledger is not None
        manifest = run.data_manifest
        for digest in manifest.object_digests:  # the shards, and the tokenizer.json if any
            self._store.put(iter([run.shard_source.read(digest)]), expected_sha256=digest)
        document = canonical_json(manifest.to_payload())
        entry = DataManifestEntry.recording(
            manifest, manifest_object=self._store.put_bytes(document), document_bytes=len(document)
        )
        self._ledger.append(run.run_id, KIND_DATA_MANIFEST, entry.to_payload())
        self._witness(run.run_id)

    def _store_model_index(self, files: Mapping[str, str]) -> dict[str, str]:
        """Write ``model.safetensors.index.json`` from the stored shards' own headers (tensor
        names and byte sizes), so no process ever holds the whole model."""
        shards = {
            name: _stored_tensor_sizes(self._store, digest)
            for name, digest in files.items()
            if is_model_shard(name)
        }
        if not shards:
            return {}
        with tempfile.TemporaryDirectory(prefix="veritrain-index-") as folder:
            digests = write_model_index(folder, shards)
            upload_files(self._store, folder, digests)
        return {INDEX_FILE: digests[INDEX_FILE]}


@dataclass
class _PendingStep:
    """A step whose objects are stored and whose clusters are attesting."""

    step: int
    generations: GenerationsRef
    checkpoint: CheckpointRef
    statement_object: str
    statement_digest: str
    nonce: str
    metrics: dict[str, float]
    """The step's finite metrics, whose digest the statement signed."""
    nonfinite_metrics: tuple[str, ...]
    compression: Compression


@dataclass
class _RunContext:
    run_id: str
    config: TrainConfig
    tokenizer: Tokenizer
    config_digest: str
    clusters: tuple[int, ...]
    shard_digests: dict[int, str]
    previous_manifest_root: str | None
    statements: list[str]
    """Every recorded step's statement digest, in order (the attesters' event history)."""
    signer: StatementSigner
    pending: _PendingStep | None = None
    last_step: OuterStep | None = None


def _compression(report: OuterStepReport) -> Compression:
    last = report.applied[-1] if report.applied else None
    return (
        Compression(rank=last.rank, bits=last.bits)
        if last
        else Compression(rank=0, bits=UNCOMPRESSED_BITS)
    )


def _checked_enrollments(run: RunStart, *, every_cluster: bool) -> tuple[ClusterKeys, ...]:
    """The clusters' enrolments, each proof of possession checked before it is recorded (a new
    run's genesis names every cluster's keys; a continued run compares those that came)."""
    clusters = run.topology.clusters
    enrollments = tuple(sorted(run.enrollments, key=lambda k: k.cluster))
    if every_cluster and [k.cluster for k in enrollments] != list(range(clusters)):
        raise RecorderError(
            f"expected the enrolment of every cluster 0..{clusters - 1}, "
            f"got clusters {[k.cluster for k in enrollments]}"
        )
    for keys in enrollments:
        for role, vkey, proof in (
            ("contribution", keys.contribution, keys.contribution_proof),
            ("attestation", keys.attestation, keys.attestation_proof),
        ):
            try:
                verify_possession(
                    enrolment(run.run_id, run.config_digest, keys, role),
                    PublicKey.from_vkey(vkey),
                    proof,
                )
            except AttestationError as exc:
                raise RecorderError(
                    f"cluster {keys.cluster} enrolled a {role} key it does not hold: {exc}"
                ) from None
    return enrollments


def _collect_evidence(
    report: OuterStepReport, clusters: tuple[int, ...]
) -> tuple[tuple[ClusterContributions, ...], tuple[QuoteRef, ...]]:
    """The step's signed contributions and quotes, as the clusters' processes made them: every
    contribution the step reports, signed over the digest it reports, and a quote from every
    cluster in ``clusters`` (the step's clusters that were still there to quote)."""
    signed = {
        (e.cluster, e.contribution.stage): e.contribution
        for e in report.evidence
        if e.contribution is not None
    }
    wanted = {(c.cluster, c.stage): c.digest for c in report.contribution_digests}
    for key, digest in wanted.items():
        got = signed.get(key)
        if got is None or got.digest != digest:
            raise RecorderError(
                f"outer step {report.step}: cluster {key[0]} stage "
                f"{key[1]} did not sign its contribution {digest[:16]}…"
            )
    by_cluster: dict[int, list[StageContribution]] = {}
    for (cluster, _), contribution in sorted(signed.items()):
        if (cluster, contribution.stage) in wanted:
            by_cluster.setdefault(cluster, []).append(contribution)
    quotes = {
        e.quote.cluster: e.quote
        for e in report.evidence
        if e.quote is not None and e.quote.cluster in clusters
    }
    missing = [c for c in clusters if c not in quotes]
    if missing:
        raise RecorderError(f"outer step {report.step}: no quote from cluster(s) {missing}")
    return (
        tuple(
            ClusterContributions(cluster=c, stages=tuple(s)) for c, s in sorted(by_cluster.items())
        ),
        tuple(quotes[c] for c in clusters),
    )


def append_final(ledger: Ledger, run_id: str, last: OuterStep) -> RunFinal:
    """Append the ``run.final`` entry of a run whose last outer step is ``last``: the one
    writer of ``run.final`` (the recorder at the end of a run, ``train --resume`` for a run
    killed just before it)."""
    final = RunFinal.after(last)
    ledger.append(run_id, KIND_FINAL, final.to_payload())
    return final


def _recorded(ledger: Ledger, run_id: str) -> RecordedRun:
    bodies: list[bytes] = []
    while page := ledger.entries(run_id, start=len(bodies), limit=1000):
        bodies.extend(e.body for e in page)
    return RecordedRun.from_bodies(run_id, bodies)


def _check_continuation(
    recorded: RecordedRun, run: RunStart, enrollments: tuple[ClusterKeys, ...]
) -> None:
    """A launch may only continue the ledger's run: same configuration, same cluster keys,
    right step."""
    genesis = recorded.genesis
    for keys in enrollments:
        if keys.cluster >= len(genesis.keys.clusters):
            continue
        enrolled = genesis.keys.cluster(keys.cluster)
        if _public_keys(enrolled) != _public_keys(keys):
            raise RecorderError(
                f"cluster {keys.cluster}'s key folder holds other "
                f"keys than run {run.run_id!r} enrolled at genesis: "
                "resume each cluster with the key folder it started with"
            )
        # A run recorded before enrolments named a hardware class has none to hold to.
        if enrolled.hardware is not None and enrolled.hardware != keys.hardware:
            differences = hardware_differences(enrolled.hardware, keys.hardware)
            raise RecorderError(
                f"cluster {keys.cluster} now runs in another hardware class than it enrolled "
                f"at genesis ({'; '.join(differences)}): the run's policy names that class, so "
                "resume the cluster on it"
            )
    if genesis.config_digest != run.config_digest:
        raise RecorderError(
            f"run {run.run_id!r} exists with configuration {genesis.config_digest}, "
            f"got {run.config_digest}: pick another run id, or "
            f"resume it with `veritrain train --resume {run.run_id}`"
        )
    latest = recorded.last_step
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


def _public_keys(keys: ClusterKeys) -> tuple[str, str, str]:
    return keys.contribution, keys.attestation, keys.platform_root


def _stored_tensor_sizes(store: ObjectStore, digest: str) -> dict[str, int]:
    def read(start: int, end: int) -> bytes:
        with store.open(digest, start, end) as reader:
            return reader.read()

    return header_tensor_sizes(read)


def _finite_metrics(metrics: Mapping[str, float]) -> tuple[dict[str, float], list[str]]:
    """RFC 8785 has no NaN or infinity: such values are left out and their names listed."""
    finite = {k: float(v) for k, v in metrics.items() if math.isfinite(float(v))}
    return finite, sorted(k for k in metrics if k not in finite)
