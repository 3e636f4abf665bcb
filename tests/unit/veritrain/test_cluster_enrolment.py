"""A cluster's enrolment signs the hardware class its own process measured
(veritrain/cluster_identity.py, attestation/enrolment.py): the class cannot be changed without
the cluster's keys, and a run enrolled before classes were signed (v1) still verifies."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from attestation.canonical import canonical_json
from attestation.enrolment import Enrolment, EnrolmentError, verify_possession
from attestation.keys import PublicKey
from records.genesis import ClusterKeys
from veritrain.cluster_identity import ClusterKeyFolder, enrolment
from veritrain.hardware import training_hardware

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
