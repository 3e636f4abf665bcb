"""The ``run.genesis`` record of a new run (records/genesis.py is its format).

Everything a verifier later trusts is fixed here: the code and dependency digests, the full
configuration and its digest, the topology and seed, every public key of the run, the TEE
type and the reference measurements its quotes must match, and the verification policy,
chosen before any training happens.
"""

from __future__ import annotations

from attestation.canonical import canonical_digest
from attestation.registry import tee_backend
from records.genesis import (
    ClusterKeys,
    CodeIdentity,
    DependencyIdentity,
    Genesis,
    ReferenceDigests,
    RunKeys,
    TeeReference,
)
from trainer.config import TrainConfig
from trainer.recorder import RunStart
from veritrain.errors import RecorderError
from veritrain.hardware import hardware_differences, training_hardware
from veritrain.model_signature import load_or_create_key, public_pem
from veritrain.policy import PolicyChoice
from veritrain.record.keyring import KeyRing
from veritrain.rules import written_for


def reference_launch_measurement(
    tee_type: str, code: CodeIdentity, dependencies: DependencyIdentity, config_digest: str
) -> bytes:
    """What an attester of ``tee_type`` reports for a launch of this code, these dependencies and
    this configuration: the genesis' reference value (attestation/registry.py)."""
    return tee_backend(tee_type).launch_measurement(
        code_digest=code.source_sha256,
        dependency_digest=dependencies.sha256,
        config_digest=config_digest,
    )


def run_genesis(
    run: RunStart,
    *,
    keys: KeyRing,
    clusters: tuple[ClusterKeys, ...],
    code: CodeIdentity,
    dependencies: DependencyIdentity,
    policy: PolicyChoice,
    tee_type: str,
) -> Genesis:
    if canonical_digest(dict(run.config)) != run.config_digest:
        raise RecorderError(
            f"run {run.run_id!r}: the trainer's config digest "
            f"{run.config_digest} is not the digest of its configuration"
        )
    topology = run.topology
    hardware = training_hardware(topology.device, torch_version=dependencies.torch)
    for enrolled in clusters:
        # The policy names one class; every cluster signed the class it measured at enrolment.
        if enrolled.hardware is not None and enrolled.hardware != hardware:
            differences = hardware_differences(
                hardware, enrolled.hardware, labels=("here", f"on cluster {enrolled.cluster}")
            )
            raise RecorderError(
                f"run {run.run_id!r}: cluster {enrolled.cluster} runs in another hardware class "
                f"than the coordinator ({'; '.join(differences)}); a run's verification policy "
                "names one class, so train every cluster in it"
            )
    tee = tee_backend(tee_type)
    return Genesis(
        run_id=run.run_id,
        method=str(run.config.get("method")),
        model=run.model,
        hyperparameters=dict(run.config),
        config_digest=run.config_digest,
        topology=topology,
        seed=run.seed,
        tokenizer=run.data_manifest.tokenizer,
        code=code,
        dependencies=dependencies,
        keys=RunKeys(
            log=keys.log_key(run.run_id).public.vkey,
            statement=keys.statement_key(run.run_id).public.vkey,
            model_signing=public_pem(load_or_create_key(keys.model_signing_key(run.run_id))),
            clusters=clusters,
        ),
        tee=TeeReference(
            type=tee.tee_type,
            svn=tee.svn,
            minimum_svn=tee.svn,
            debug=False,
            launch_measurement=reference_launch_measurement(
                tee.tee_type, code, dependencies, run.config_digest
            ).hex(),
            reference=ReferenceDigests(
                code_digest=code.source_sha256,
                dependency_digest=dependencies.sha256,
                config_digest=run.config_digest,
            ),
        ),
        verification_policy=policy.recorded(hardware=hardware),
        # The configuration chooses the verdict rule; the genesis names the same one.
        rules=written_for(TrainConfig.from_dict(dict(run.config)).outer.anomaly_rule),
    )
