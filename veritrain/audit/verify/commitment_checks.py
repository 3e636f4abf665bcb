"""Checks 10 and 11: what the genesis commits to, recomputed, and the ``run.final`` entry,
recomputed from the last outer step.

10. The genesis names only rules this veritrain implements (veritrain/rules.py; otherwise the
    run is refused, not judged by other rules), reads as a configuration the trainer accepts
    exactly (``TrainConfig``; fields added since the run was recorded read as their defaults),
    its config digest is the SHA-256 of that configuration's canonical JSON, its method, seed,
    topology and model agree with the configuration, its TEE reference digests are the
    recorded code, dependency and config digests, every cluster's enrolled keys carry proofs of
    possession for this run, configuration and the hardware class the cluster measured, the
    policy's hardware class is that class, and its verification policy lies within the
    published bounds (veritrain/policy.py, docs/auditing.md). A warning says when this machine
    is outside the class (no re-execution here can be bitwise).
11. A ``run.final`` entry, if the run has one, is exactly what its last outer step implies
    (last checkpoint, steps, tokens, final metrics) and comes after the configuration's last
    planned step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attestation.canonical import canonical_digest, canonical_json
from attestation.enrolment import verify_possession
from attestation.errors import AttestationError
from attestation.keys import PublicKey
from attestation.measurement import launch_measurement
from records import Genesis, RunFinal
from trainer.config import TrainConfig
from trainer.errors import TrainerError
from veritrain.audit.verify.report import CheckResult, Report
from veritrain.cluster_identity import enrolment
from veritrain.hardware import (
    hardware_differences,
    outside_class_warning,
    reexecution_hardware,
)
from veritrain.policy import policy_problems
from veritrain.rules import unimplemented
from veritrain.sources.recorded_run import RecordedRun


def check_genesis(report: Report, run: RecordedRun) -> TrainConfig | None:
    """10. Returns the run's configuration when it can be read (later checks recompute from it)."""
    result = report.check(10)
    entry = run.genesis_entry
    if entry is None or not isinstance(entry.record, Genesis):
        result.fail(
            "the run has no readable genesis"
            + (f": {entry.problem}" if entry and entry.problem else ""),
            index=0,
        )
        return None
    genesis = entry.record
    result.checked = 1
    # 10.0 The run is judged by the rules its genesis names, or not at all (veritrain/rules.py).
    if refused := unimplemented(genesis.rules):
        for problem in refused:
            result.fail(problem, index=0)
        return None

    # 10a. The configuration: readable by the trainer, exactly, and hashing to the digest.
    recomputed = canonical_digest(dict(genesis.hyperparameters))
    if recomputed != genesis.config_digest:
        result.fail(
            f"config digest: expected {recomputed} (SHA-256 of the "
            f"recorded hyperparameters), got {genesis.config_digest}",
            index=0,
        )
    config: TrainConfig | None
    try:
        config = TrainConfig.from_dict(genesis.hyperparameters)
    except (TrainerError, TypeError, ValueError) as exc:
        result.fail(
            f"the recorded hyperparameters are not a configuration the trainer accepts: {exc}",
            index=0,
        )
        config = None
    if config is not None and canonical_json(
        _as_recorded(config.to_dict(), genesis.hyperparameters)
    ) != canonical_json(dict(genesis.hyperparameters)):
        result.fail(
            "the recorded hyperparameters do not read back "
            "as themselves (fields the trainer would change)",
            index=0,
        )

    # 10b. What the genesis says besides the configuration must agree with it -- the verdict
    # rule it names included: the configuration chooses it (``outer.anomaly_rule``) and check 12
    # replays the configuration's, so the two must be one.
    if config is not None and genesis.rules.verdict != config.outer.anomaly_rule:
        result.fail(
            f"rules.verdict: expected {config.outer.anomaly_rule!r} (the configuration's "
            f"outer.anomaly_rule), got {genesis.rules.verdict!r}",
            index=0,
        )
    if genesis.run_id != run.run_id:
        result.fail(f"run id: expected {run.run_id!r}, got {genesis.run_id!r}", index=0)
    if config is not None:
        topology = genesis.topology
        agreements: tuple[tuple[str, object, object], ...] = (
            ("method", config.method, genesis.method),
            ("seed", config.seed, genesis.seed),
            ("topology.clusters", config.clusters, topology.clusters),
            ("topology.stages", config.stages, topology.stages),
            ("topology.data_parallel", config.data_parallel, topology.data_parallel),
            ("topology.world_size", config.world_size, topology.world_size),
            ("model shape", config.model.to_dict(), dict(genesis.model.shape)),
            (
                "model.parameter_count",
                config.model.parameter_count(),
                genesis.model.parameter_count,
            ),
        )
        agreements += (
            (
                "verification_policy.hardware.device",
                topology.device,
                genesis.verification_policy.hardware.device,
            ),
        )
        for what, expected, actual in agreements:
            if expected != actual:
                result.fail(
                    f"{what}: expected {expected!r} (from the configuration), got {actual!r}",
                    index=0,
                )

    # 10c. The TEE reference: the recorded digests, and a launch measurement that hashes them.
    reference = genesis.tee.reference
    for name, expected, actual in (
        ("code_digest", genesis.code.source_sha256, reference.code_digest),
        ("dependency_digest", genesis.dependencies.sha256, reference.dependency_digest),
        ("config_digest", genesis.config_digest, reference.config_digest),
    ):
        if expected != actual:
            result.fail(
                f"tee.reference.{name}: expected the recorded {expected}, got {actual}", index=0
            )
    measurement = launch_measurement(
        code_digest=reference.code_digest,
        dependency_digest=reference.dependency_digest,
        config_digest=reference.config_digest,
    ).hex()
    if measurement != genesis.tee.launch_measurement:
        result.fail(
            f"tee.launch_measurement: expected {measurement} (SHA-384 of the reference digests), "
            f"got {genesis.tee.launch_measurement}",
            index=0,
        )

    # 10d. Every cluster's enrolled keys: its proofs of possession, for this run and
    # configuration, and for the hardware class the cluster measured (enrolment v2).
    for keys in genesis.keys.clusters:
        for role, vkey, proof in (
            ("contribution", keys.contribution, keys.contribution_proof),
            ("attestation", keys.attestation, keys.attestation_proof),
        ):
            try:
                verify_possession(
                    enrolment(genesis.run_id, genesis.config_digest, keys, role),
                    PublicKey.from_vkey(vkey),
                    proof,
                )
            except AttestationError as exc:
                result.fail(f"keys.clusters[{keys.cluster}]: {exc}", index=0)

    # 10e. The policy's hardware class is the one every cluster measured and signed.
    signed = _check_hardware_class(result, genesis)

    # 10f. The policy: within the published bounds, or it is no check at all.
    for problem in policy_problems(genesis.verification_policy):
        result.fail(f"verification policy: {problem}", index=0)
    policy = genesis.verification_policy
    result.notes.append(
        f"policy {policy.mode} on "
        f"{policy.hardware.device}/{policy.hardware.machine}/{policy.hardware.cpu_capability}"
        f"{' ' + policy.hardware.gpu if policy.hardware.gpu else ''}, "
        f"torch {policy.hardware.torch}; elsewhere "
        f"{policy.fallback.metric} within {policy.fallback.delta}, "
        f"parameters within {policy.fallback.parameter_distance}"
    )
    if config is not None:
        _warn_outside_the_class(report, genesis, config, signed=signed)
    return config


def _check_hardware_class(result: CheckResult, genesis: Genesis) -> bool:
    """10e. Whether the clusters' own processes signed the policy's class (False for a run
    recorded before enrolments named one)."""
    hardware = genesis.verification_policy.hardware
    clusters = genesis.keys.clusters
    measured = [k.cluster for k in clusters if k.hardware is not None]
    if not measured:
        result.notes.append(
            "hardware class not recorded by this run's version (its clusters' enrolments name "
            "none): the policy's class is the coordinator's word alone"
        )
        return False
    unmeasured = [k.cluster for k in clusters if k.hardware is None]
    if unmeasured:
        result.fail(
            f"keys.clusters: cluster(s) {unmeasured} enrolled no hardware class, while "
            f"cluster(s) {measured} did (a run's clusters enrol with one version)",
            index=0,
        )
    for keys in clusters:
        if keys.hardware is not None and keys.hardware != hardware:
            differences = hardware_differences(
                keys.hardware,
                hardware,
                labels=(f"measured by cluster {keys.cluster}", "in the policy"),
            )
            result.fail(
                "verification_policy.hardware: expected the class cluster "
                f"{keys.cluster} measured and signed at enrolment, got {'; '.join(differences)}",
                index=0,
            )
    if not unmeasured and result.passed:
        result.notes.append("hardware class signed by every cluster at enrolment")
    return not unmeasured


def _warn_outside_the_class(
    report: Report, genesis: Genesis, config: TrainConfig, *, signed: bool
) -> None:
    """Say loudly when a re-execution on this machine cannot be inside the run's class: every
    audit here then judges by the tolerance, whatever the policy says."""
    warning = outside_class_warning(
        genesis.verification_policy.hardware, reexecution_hardware(config), signed=signed
    )
    if warning is not None:
        report.warnings.append(warning)


def check_final(report: Report, run: RecordedRun, config: TrainConfig | None) -> None:
    """11. ``run.final`` against the last outer step."""
    result = report.check(11)
    entry = run.final_entry
    if entry is None:
        result.notes.append("the run has not finished: no run.final entry yet")
        return
    result.checked = 1
    if not isinstance(entry.record, RunFinal):
        result.fail(f"run.final cannot be read: {entry.problem}", index=entry.index)
        return
    steps = run.outer_steps
    if not steps:
        result.fail("run.final follows no outer step", index=entry.index)
        return
    expected = RunFinal.after(steps[-1][1])
    final = entry.record
    for what, want, got in (
        ("steps", expected.steps, final.steps),
        ("tokens", expected.tokens, final.tokens),
        ("last_checkpoint.manifest_root", expected.last_manifest_root, final.last_manifest_root),
        ("final_metrics", dict(expected.final_metrics), dict(final.final_metrics)),
    ):
        if want != got:
            result.fail(
                f"{what}: expected {want!r} (from outer step {steps[-1][1].step}), got {got!r}",
                index=entry.index,
            )
    if config is not None and final.steps != config.outer_steps:
        result.fail(
            f"the run finished after {final.steps} outer steps, "
            f"but its configuration plans {config.outer_steps}",
            index=entry.index,
        )


def _as_recorded(current: Any, recorded: Any) -> Any:
    """``current`` without the configuration fields added after ``recorded`` was written: a
    run recorded before a field existed ran as its default does (docs/records.md, "Versions")."""
    if isinstance(current, dict) and isinstance(recorded, Mapping):
        return {k: _as_recorded(v, recorded[k]) for k, v in current.items() if k in recorded}
    return current
