"""``run.genesis``: what a run commits to before its first step (docs/records.md).

Everything a verifier later trusts is fixed here: the code and dependency digests, the full
configuration and its digest, the topology and seed, every public key of the run, the TEE
type and reference measurements its quotes must match, and the verification policy chosen
before any training happens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from records.data_manifest import TokenizerIdentity
from records.fields import Fields
from records.rules import IMPLIED, Rules
from records.versions import GENESIS

SCHEMA = GENESIS.current
METHODS = ("allreduce", "diloco", "dilocox")
POLICY_MODES = ("bitwise", "tolerance")


@dataclass(frozen=True, kw_only=True)
class CodeIdentity:
    """The source tree that trained (veritrain/record/provenance.py computes it)."""

    source_sha256: str
    """SHA-256 over the ``sha256sum``-format lines of every source file, sorted by path."""
    git_commit: str | None
    git_dirty: bool
    files: int

    def to_payload(self) -> dict[str, Any]:
        return {
            "source_sha256": self.source_sha256,
            "git_commit": self.git_commit,
            "git_dirty": self.git_dirty,
            "files": self.files,
        }

    @classmethod
    def read(cls, f: Fields) -> CodeIdentity:
        value = cls(
            source_sha256=f.digest("source_sha256"),
            git_commit=f.optional_string("git_commit"),
            git_dirty=f.boolean("git_dirty"),
            files=f.integer("files", minimum=0),
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class DependencyIdentity:
    sha256: str
    """SHA-256 of the sorted ``name==version`` lines of every installed distribution."""
    python: str
    torch: str
    distributions: int

    def to_payload(self) -> dict[str, Any]:
        return {
            "sha256": self.sha256,
            "python": self.python,
            "torch": self.torch,
            "distributions": self.distributions,
        }

    @classmethod
    def read(cls, f: Fields) -> DependencyIdentity:
        value = cls(
            sha256=f.digest("sha256"),
            python=f.string("python"),
            torch=f.string("torch"),
            distributions=f.integer("distributions", minimum=0),
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class ModelSummary:
    """The model's shape (``ModelConfig`` fields), parameter count and stage split."""

    shape: Mapping[str, Any]
    """``ModelConfig.to_dict()``: its typed home is trainer/model.py."""
    parameter_count: int
    stage_blocks: tuple[tuple[int, ...], ...]
    """The transformer blocks each pipeline stage holds."""

    def to_payload(self) -> dict[str, Any]:
        return {
            **self.shape,
            "parameter_count": self.parameter_count,
            "stage_blocks": [list(blocks) for blocks in self.stage_blocks],
        }

    @classmethod
    def read(cls, f: Fields) -> ModelSummary:
        count = f.integer("parameter_count", minimum=1)
        stages = tuple(_blocks(f, i, item) for i, item in enumerate(f.array("stage_blocks")))
        shape = {k: v for k, v in f.data.items() if k not in ("parameter_count", "stage_blocks")}
        return cls(shape=shape, parameter_count=count, stage_blocks=stages)


def _blocks(f: Fields, i: int, item: Any) -> tuple[int, ...]:
    if not isinstance(item, list) or any(
        isinstance(b, bool) or not isinstance(b, int) or b < 0 for b in item
    ):
        raise f.fail(f"stage_blocks[{i}]", "an array of block numbers", item)
    return tuple(item)


@dataclass(frozen=True, kw_only=True)
class Topology:
    clusters: int
    stages: int
    world_size: int
    backend: str
    device: str
    rank: str
    """How a global rank is formed, e.g. ``cluster * stages + stage``."""
    present: tuple[int, ...]
    """The clusters that start the run."""
    data_parallel: int = 1
    """D: data-parallel replicas of each stage in a cluster (written only when > 1)."""

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "clusters": self.clusters,
            "stages": self.stages,
            "world_size": self.world_size,
            "backend": self.backend,
            "device": self.device,
            "rank": self.rank,
            "present": list(self.present),
        }
        if self.data_parallel > 1:
            payload["data_parallel"] = self.data_parallel
        return payload

    @classmethod
    def read(cls, f: Fields) -> Topology:
        value = cls(
            clusters=f.integer("clusters", minimum=1),
            stages=f.integer("stages", minimum=1),
            world_size=f.integer("world_size", minimum=1),
            backend=f.string("backend"),
            device=f.string("device"),
            rank=f.string("rank"),
            present=f.integers("present", minimum=0),
            data_parallel=f.integer("data_parallel", minimum=2) if f.has("data_parallel") else 1,
        )
        f.exactly()
        if any(c >= value.clusters for c in value.present):
            raise f.fail("present", f"cluster indices below {value.clusters}", list(value.present))
        return value


@dataclass(frozen=True, kw_only=True)
class ClusterKeys:
    """What one cluster enrolled at genesis: keys created on its own host, in its own key
    folder, with proofs of possession made in its own process (attestation/enrolment.py)."""

    cluster: int
    contribution: str
    """Verifier key of the cluster's contribution-signing key."""
    contribution_proof: str
    """Base64 signature by that key over the enrolment (run id, config digest, role)."""
    attestation: str
    """Verifier key of the cluster's attestation (quote) key."""
    attestation_proof: str
    platform_root: str
    """The cluster's platform key, which endorses its attestation key (the software TEE's
    "vendor"; a hardware TEE's vendor chain takes its place)."""
    hardware: HardwareClass | None = None
    """The hardware class the cluster's own process measured, covered by both proofs
    (enrolment v2); absent from runs recorded before it existed."""

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "cluster": self.cluster,
            "contribution": self.contribution,
            "contribution_proof": self.contribution_proof,
            "attestation": self.attestation,
            "attestation_proof": self.attestation_proof,
            "platform_root": self.platform_root,
        }
        if self.hardware is not None:
            payload["hardware"] = self.hardware.to_payload()
        return payload

    @classmethod
    def read(cls, f: Fields) -> ClusterKeys:
        value = cls(
            cluster=f.integer("cluster", minimum=0),
            contribution=f.string("contribution", nonempty=True),
            contribution_proof=f.string("contribution_proof", nonempty=True),
            attestation=f.string("attestation", nonempty=True),
            attestation_proof=f.string("attestation_proof", nonempty=True),
            platform_root=f.string("platform_root", nonempty=True),
            # Optional: the class each cluster signs at enrolment v2 (genesis v2's release);
            # a v1 enrolment has none, and its proofs do not cover one.
            hardware=HardwareClass.read(f.obj("hardware")) if f.has("hardware") else None,
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class RunKeys:
    """Verifier keys (C2SP ``name+keyid+base64``) of every signer of the run."""

    log: str
    """Signs the run's tree heads; its name is the log origin."""
    statement: str
    """Signs the DSSE provenance statements (the coordinator's)."""
    model_signing: str
    """PEM public key that signs every checkpoint for OpenSSF model signing (``model.sig``)."""
    clusters: tuple[ClusterKeys, ...]
    """Cluster j's enrolled keys at position j."""

    def cluster(self, index: int) -> ClusterKeys:
        return self.clusters[index]

    def to_payload(self) -> dict[str, Any]:
        return {
            "log": self.log,
            "statement": self.statement,
            "model_signing": self.model_signing,
            "clusters": [c.to_payload() for c in self.clusters],
        }

    @classmethod
    def read(cls, f: Fields) -> RunKeys:
        value = cls(
            log=f.string("log", nonempty=True),
            statement=f.string("statement", nonempty=True),
            model_signing=f.string("model_signing", nonempty=True),
            clusters=f.items("clusters", ClusterKeys.read),
        )
        f.exactly()
        for position, keys in enumerate(value.clusters):
            if keys.cluster != position:
                raise f.fail(
                    f"clusters[{position}].cluster", f"{position} (clusters in order)", keys.cluster
                )
        return value


@dataclass(frozen=True, kw_only=True)
class ReferenceDigests:
    """What the launch measurement hashes (attestation/measurement.py)."""

    code_digest: str
    dependency_digest: str
    config_digest: str

    def to_payload(self) -> dict[str, Any]:
        return {
            "code_digest": self.code_digest,
            "dependency_digest": self.dependency_digest,
            "config_digest": self.config_digest,
        }

    @classmethod
    def read(cls, f: Fields) -> ReferenceDigests:
        value = cls(
            code_digest=f.digest("code_digest"),
            dependency_digest=f.digest("dependency_digest"),
            config_digest=f.digest("config_digest"),
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class TeeReference:
    """The TEE the quotes come from and the measurements they must carry (DESIGN.md §5)."""

    type: str
    svn: int
    minimum_svn: int
    debug: bool
    launch_measurement: str
    """Hex SHA-384 of the reference digests (attestation.measurement.launch_measurement)."""
    reference: ReferenceDigests

    def to_payload(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "svn": self.svn,
            "minimum_svn": self.minimum_svn,
            "debug": self.debug,
            "launch_measurement": self.launch_measurement,
            "reference": self.reference.to_payload(),
        }

    @classmethod
    def read(cls, f: Fields) -> TeeReference:
        value = cls(
            type=f.string("type", nonempty=True),
            svn=f.integer("svn", minimum=0),
            minimum_svn=f.integer("minimum_svn", minimum=0),
            debug=f.boolean("debug"),
            launch_measurement=f.hex("launch_measurement", nbytes=48),
            reference=ReferenceDigests.read(f.obj("reference")),
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class DeterministicFlags:
    """The settings that make kernels repeatable (trainer/runtime/determinism.py), as they were
    in the process that trained; the CUDA ones are null on CPU."""

    algorithms: bool
    """``torch.use_deterministic_algorithms`` was on."""
    cudnn_benchmark: bool | None
    """``torch.backends.cudnn.benchmark`` (must be off: autotuning picks kernels by timing)."""
    cublas_workspace_config: str | None
    """``CUBLAS_WORKSPACE_CONFIG``, which cuBLAS needs for deterministic GEMMs."""

    def to_payload(self) -> dict[str, Any]:
        return {
            "algorithms": self.algorithms,
            "cudnn_benchmark": self.cudnn_benchmark,
            "cublas_workspace_config": self.cublas_workspace_config,
        }

    @classmethod
    def read(cls, f: Fields) -> DeterministicFlags:
        benchmark = f.raw("cudnn_benchmark")
        if benchmark is not None and not isinstance(benchmark, bool):
            raise f.fail("cudnn_benchmark", "true, false or null", benchmark)
        value = cls(
            algorithms=f.boolean("algorithms"),
            cudnn_benchmark=benchmark,
            cublas_workspace_config=f.optional_string("cublas_workspace_config"),
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class HardwareClass:
    """Where bitwise reproduction holds: the machine class and software that trained
    (veritrain/hardware.py measures it)."""

    device: str
    """``cpu`` or ``cuda``."""
    machine: str
    """CPU architecture (``platform.machine()``)."""
    cpu_capability: str
    """The vector instruction set torch's CPU kernels dispatch to (``AVX2``, ``AVX512``, ...):
    two x86_64 machines with different ones sum in different orders."""
    torch: str
    gpu: str | None
    """The GPU model (``torch.cuda.get_device_name``); null on CPU."""
    cuda: str | None
    """The CUDA version torch was built with; null on CPU."""
    cudnn: str | None
    """The cuDNN version; null on CPU."""
    deterministic: DeterministicFlags

    def to_payload(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "machine": self.machine,
            "cpu_capability": self.cpu_capability,
            "torch": self.torch,
            "gpu": self.gpu,
            "cuda": self.cuda,
            "cudnn": self.cudnn,
            "deterministic": self.deterministic.to_payload(),
        }

    @classmethod
    def read(cls, f: Fields) -> HardwareClass:
        value = cls(
            device=f.string("device"),
            machine=f.string("machine"),
            cpu_capability=f.string("cpu_capability"),
            torch=f.string("torch"),
            gpu=f.optional_string("gpu"),
            cuda=f.optional_string("cuda"),
            cudnn=f.optional_string("cudnn"),
            deterministic=DeterministicFlags.read(f.obj("deterministic")),
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    """How a re-execution on other hardware is judged: ``metric`` within ``delta``, and every
    re-executed parameter tensor θ′ within ``parameter_distance`` of the recorded θ_t,
    measured as ‖θ′ − θ_t‖ / ‖θ_t − θ_{t−1}‖ (docs/auditing.md)."""

    metric: str
    delta: float
    parameter_distance: float

    def to_payload(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "delta": self.delta,
            "parameter_distance": self.parameter_distance,
        }

    @classmethod
    def read(cls, f: Fields) -> Tolerance:
        value = cls(
            metric=f.string("metric", nonempty=True),
            delta=f.number("delta", minimum=0.0),
            parameter_distance=f.number("parameter_distance", minimum=0.0),
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class VerificationPolicy:
    """How ``veritrain reproduce`` judges a re-executed step, fixed before training.

    ``bitwise``: the re-executed checkpoint must equal the recorded one byte for byte on the
    hardware class that trained (``hardware``); elsewhere ``fallback`` applies.
    ``tolerance``: ``fallback`` applies everywhere."""

    mode: str
    hardware: HardwareClass
    fallback: Tolerance

    def to_payload(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "hardware": self.hardware.to_payload(),
            "fallback": self.fallback.to_payload(),
        }

    @classmethod
    def read(cls, f: Fields) -> VerificationPolicy:
        value = cls(
            mode=f.string("mode", choices=POLICY_MODES),
            hardware=HardwareClass.read(f.obj("hardware")),
            fallback=Tolerance.read(f.obj("fallback")),
        )
        f.exactly()
        return value


@dataclass(frozen=True, kw_only=True)
class Genesis:
    """The ``run.genesis`` payload (entry 0)."""

    run_id: str
    method: str
    model: ModelSummary
    hyperparameters: Mapping[str, Any]
    """``TrainConfig.to_dict()`` (its typed home is trainer/config.py)."""
    config_digest: str
    """SHA-256 of the RFC 8785 canonical JSON of ``hyperparameters``."""
    topology: Topology
    seed: int
    tokenizer: TokenizerIdentity
    """The corpus's tokenizer, by kind and the digest of its ``tokenizer.json`` (the data
    manifest names the same)."""
    code: CodeIdentity
    dependencies: DependencyIdentity
    keys: RunKeys
    tee: TeeReference
    verification_policy: VerificationPolicy
    rules: Rules
    """The rules the run is judged by, each with its version (written from genesis v2 on; a
    v1 genesis implies ``records.rules.RULES_V1``)."""
    schema: str = field(default=SCHEMA)

    @property
    def version(self) -> int:
        """The schema version (``GENESIS.versions``) this genesis was written in."""
        return GENESIS.version_of_id(self.schema)

    def to_payload(self) -> dict[str, Any]:
        payload = {
            "schema": self.schema,
            "run_id": self.run_id,
            "method": self.method,
            "model": self.model.to_payload(),
            "hyperparameters": dict(self.hyperparameters),
            "config_digest": self.config_digest,
            "topology": self.topology.to_payload(),
            "seed": self.seed,
            "tokenizer": self.tokenizer.to_payload(),
            "code": self.code.to_payload(),
            "dependencies": self.dependencies.to_payload(),
            "keys": self.keys.to_payload(),
            "tee": self.tee.to_payload(),
            "verification_policy": self.verification_policy.to_payload(),
        }
        if self.version >= 2:
            payload["rules"] = self.rules.to_payload()
        return payload

    @classmethod
    def from_payload(cls, payload: Any, *, where: str = "run.genesis") -> Genesis:
        f = Fields(payload, where=where)
        version = GENESIS.version_of(f)
        value = cls(
            run_id=f.string("run_id", nonempty=True),
            method=f.string("method", choices=METHODS),
            model=ModelSummary.read(f.obj("model")),
            hyperparameters=f.mapping("hyperparameters"),
            config_digest=f.digest("config_digest"),
            topology=Topology.read(f.obj("topology")),
            seed=f.integer("seed"),
            tokenizer=TokenizerIdentity.read(f.obj("tokenizer")),
            code=CodeIdentity.read(f.obj("code")),
            dependencies=DependencyIdentity.read(f.obj("dependencies")),
            keys=RunKeys.read(f.obj("keys")),
            tee=TeeReference.read(f.obj("tee")),
            verification_policy=VerificationPolicy.read(f.obj("verification_policy")),
            rules=Rules.read(f.obj("rules")) if f.since(2) else IMPLIED[version],
            schema=GENESIS.schema(version),
        )
        f.exactly()
        if len(value.keys.clusters) != value.topology.clusters:
            raise f.fail(
                "keys.clusters",
                f"the keys of every cluster ({value.topology.clusters})",
                len(value.keys.clusters),
            )
        return value
