"""A cluster's enrolment signs the hardware class its own process measured
(veritrain/cluster_identity.py, attestation/enrolment.py): the class cannot be changed without
the cluster's keys, and a run enrolled before classes were signed (v1) still verifies."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from attestation.canonical import canonical_json
from attestation.enrolment import Enrolment, EnrolmentError, verify_possession
from attestation.keys import PublicKey
from attestation.registry import DEFAULT_TEE_TYPE
from records.genesis import ClusterKeys, CodeIdentity, DependencyIdentity
from trainer.api import config_digest
from trainer.config import with_overrides
from trainer.model import model_summary
from trainer.presets import run_preset
from trainer.recorder import RunStart
from trainer.runtime.topology import Topology
from veritrain.cluster_identity import ClusterKeyFolder, enrolment
from veritrain.errors import RecorderError
from veritrain.hardware import training_hardware
from veritrain.policy import PolicyChoice
from veritrain.record.genesis import run_genesis
from veritrain.record.keyring import KeyRing

RUN, CONFIG = "run-1", "ab" * 32


def _verify(keys: ClusterKeys) -> None:
    for role, vkey, proof in (
        ("contribution", keys.contribution, keys.contribution_proof),
        ("attestation", keys.attestation, keys.attestation_proof),
    ):
        verify_possession(enrolment(RUN, CONFIG, keys, role), PublicKey.from_vkey(vkey), proof)


def test_the_enrolled_class_is_signed_and_cannot_be_swapped(tmp_path: Path) -> None:
    measured = training_hardware("cpu")
    keys = ClusterKeyFolder(tmp_path, "example.org").enrol(RUN, CONFIG, 1, hardware=measured)
    assert keys.hardware == measured
    _verify(keys)

    nobodys = replace(measured, device="cuda", gpu="Z9000", cuda="99.9")
    with pytest.raises(EnrolmentError, match="proof of possession does not verify"):
        _verify(replace(keys, hardware=nobodys))
    with pytest.raises(EnrolmentError):
        _verify(replace(keys, hardware=None))  # nor dropped, to pass as a v1 enrolment


def test_an_enrolment_without_a_class_is_the_v1_statement(tmp_path: Path) -> None:
    keys = ClusterKeyFolder(tmp_path, "example.org").enrol(RUN, CONFIG, 0, hardware=None)
    assert keys.hardware is None and "hardware" not in keys.to_payload()
    _verify(keys)
    assert Enrolment(run_id=RUN, config_digest=CONFIG, cluster=0, role="attestation").message() == (
        canonical_json(
            {
                "cluster": 0,
                "config_digest": CONFIG,
                "purpose": "veritrain/enrolment/v1",
                "role": "attestation",
                "run_id": RUN,
            }
        )
    )


def test_a_run_whose_clusters_measured_other_classes_is_not_started(tmp_path: Path) -> None:
    """The policy names one class: a genesis is refused when a cluster enrolled another one
    (another CPU instruction set here), rather than recorded to fail verify later."""
    config = with_overrides(run_preset("tiny"), run_id=RUN, clusters=2)
    digest = config_digest(config)
    here = training_hardware("cpu", torch_version=torch.__version__)
    there = replace(here, cpu_capability="AVX2" if here.cpu_capability == "AVX512" else "AVX512")
    clusters = tuple(
        ClusterKeyFolder(tmp_path / f"cluster-{c}", "example.org").enrol(
            RUN, digest, c, hardware=hardware
        )
        for c, hardware in enumerate((here, there))
    )
    start = RunStart(
        run_id=RUN,
        config=config.to_dict(),
        config_digest=digest,
        topology=Topology.full(clusters=2, stages=config.stages).recorded(
            present=(0, 1), backend="gloo", device="cpu"
        ),
        model=model_summary(config.model, config.stages),
        data_manifest=None,  # type: ignore[arg-type]  # refused before the data is read
        shard_source=None,  # type: ignore[arg-type]
        seed=config.seed,
        resumed_from_step=None,
        enrollments=clusters,
    )
    with pytest.raises(RecorderError, match="cluster 1 runs in another hardware class") as error:
        run_genesis(
            start,
            keys=KeyRing(tmp_path / "keys", "example.org"),
            clusters=clusters,
            code=CodeIdentity(source_sha256="0" * 64, git_commit=None, git_dirty=False, files=1),
            dependencies=DependencyIdentity(
                sha256="0" * 64, python="3.11", torch=torch.__version__, distributions=1
            ),
            policy=PolicyChoice(),
            tee_type=DEFAULT_TEE_TYPE,
        )
    assert f"cpu_capability {here.cpu_capability!r} here, {there.cpu_capability!r}" in str(
        error.value
    )
