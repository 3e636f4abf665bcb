"""The ``run.genesis`` payload: what a run commits to before its first step (docs/records.md).

Everything a verifier later trusts is fixed here: the code and dependency digests, the full
configuration, the topology and seed, every public key of the run, the TEE type and the
reference measurements its quotes must match, and the verification policy (bitwise or a
tolerance on a named metric), chosen before any training happens.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attestation.attester import SOFTWARE_TEE_TYPE
from attestation.measurement import launch_measurement
from attestation.software import SOFTWARE_SVN
from trainer.recorder import RunStart
from veritrain.keyring import KeyRing
from veritrain.provenance import CodeIdentity, DependencyIdentity

GENESIS_SCHEMA = "veritrain/run.genesis/v1"


@dataclass(frozen=True, kw_only=True)
class VerificationPolicy:
    """How ``veritrain reproduce`` judges a re-executed step, fixed before training.

    ``bitwise``: the re-executed checkpoint must equal the recorded one byte for byte, which
    is only meaningful on the same hardware class and software stack (``hardware`` records
    the one that trained). ``tolerance``: the re-executed ``metric`` must be within ``delta``
    of the recorded value (for reproduction on different hardware)."""

    mode: str = "bitwise"
    metric: str = "eval_loss"
    delta: float = 1e-3

    def __post_init__(self) -> None:
        if self.mode not in ("bitwise", "tolerance"):
            raise ValueError(f"VerificationPolicy.mode: expected 'bitwise' or 'tolerance', got {self.mode!r}")
        if not self.delta >= 0:
            raise ValueError(f"VerificationPolicy.delta: expected >= 0, got {self.delta}")

    def to_json(self, *, device: str, torch_version: str) -> dict[str, Any]:
        document: dict[str, Any] = {
            "mode": self.mode,
            "hardware": {"device": device, "machine": platform.machine(), "torch": torch_version},
            # Under a bitwise policy the tolerance is still written down: it is what a verifier
            # on different hardware falls back to, and it too is fixed before training.
            "fallback": {"metric": self.metric, "delta": self.delta},
        }
        return document


def reference_launch_measurement(code: CodeIdentity, dependencies: DependencyIdentity, config_digest: str) -> bytes:
    return launch_measurement(
        code_digest=code.source_sha256, dependency_digest=dependencies.sha256, config_digest=config_digest
    )


def genesis_payload(
    run: RunStart,
    *,
    keys: KeyRing,
    code: CodeIdentity,
    dependencies: DependencyIdentity,
    policy: VerificationPolicy,
) -> dict[str, Any]:
    clusters = int(run.topology["clusters"])
    config: Mapping[str, Any] = run.config
    return {
        "schema": GENESIS_SCHEMA,
        "run_id": run.run_id,
        "method": config.get("method"),
        "model": dict(run.model),
        "hyperparameters": dict(config),
        "config_digest": run.config_digest,
        "topology": dict(run.topology),
        "seed": run.seed,
        "code": code.to_json(),
        "dependencies": dependencies.to_json(),
        "keys": {
            "log": keys.log_key(run.run_id).public.vkey,
            "statement": keys.statement_key(run.run_id).public.vkey,
            "platform_root": keys.platform_root().public.vkey,
            "attesters": [keys.attester_key(run.run_id, j).public.vkey for j in range(clusters)],
            "clusters": [keys.cluster_key(run.run_id, j).public.vkey for j in range(clusters)],
        },
        "tee": {
            "type": SOFTWARE_TEE_TYPE,
            "svn": SOFTWARE_SVN,
            "minimum_svn": SOFTWARE_SVN,
            "debug": False,
            "launch_measurement": reference_launch_measurement(code, dependencies, run.config_digest).hex(),
            "reference": {
                "code_digest": code.source_sha256,
                "dependency_digest": dependencies.sha256,
                "config_digest": run.config_digest,
            },
        },
        "verification_policy": policy.to_json(
            device=str(run.topology.get("device", "cpu")), torch_version=dependencies.torch
        ),
    }
