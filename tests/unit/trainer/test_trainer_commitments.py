"""Per-inner-step commitments (trainer/runtime/commitments.py): the digest tells bit-equal
parameters apart, and the fingerprint is what its docstring says -- re-implemented here from
that text alone -- linear, and a usable estimate of distances."""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from trainer.runtime.commitments import Fingerprinter, StageCommitments, parameters_digest

MASK = (1 << 64) - 1


def _fingerprint_from_the_docstring(name: str, values: list[float], dims: int) -> list[float]:
    key = int.from_bytes(
        hashlib.sha256(f"veritrain-fingerprint:{name}".encode()).digest()[:8], "little"
    )
    out = [0.0] * dims
    for i, x in enumerate(values):
        z = (key + (i + 1) * 0x9E3779B97F4A7C15) & MASK
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        z ^= z >> 31
        out[z % dims] += x if z < 1 << 63 else -x
    return out


def test_the_fingerprint_is_the_documented_count_sketch() -> None:
    tensor = torch.linspace(-1.0, 1.0, 50, dtype=torch.float32).reshape(5, 10)
    got = Fingerprinter(dims=8).tensor("model.layers.0.mlp.up_proj.weight", tensor)
    expected = _fingerprint_from_the_docstring(
        "model.layers.0.mlp.up_proj.weight", tensor.reshape(-1).double().tolist(), 8
    )
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_fingerprints_are_linear_and_estimate_norms() -> None:
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(64, 192, generator=generator)
    b = torch.randn(64, 192, generator=generator)
    fingerprinter = Fingerprinter()
    fa, fb = fingerprinter.tensor("w", a), fingerprinter.tensor("w", b)
    np.testing.assert_allclose(
        fingerprinter.tensor("w", a.double() - b.double()), fa - fb, atol=1e-9
    )
    ratios = []
    for seed in range(20):
        x = torch.randn(64, 192, generator=torch.Generator().manual_seed(seed))
        ratios.append(
            np.linalg.norm(fingerprinter.tensor("w", x))
            / float(torch.linalg.vector_norm(x.double()))
        )
    assert min(ratios) > 0.6 and max(ratios) < 1.4, ratios  # about sqrt(2/32) = 25 % spread


def test_one_flipped_bit_changes_the_digest_but_not_the_dtype_blind_fingerprint() -> None:
    weights = torch.nn.Parameter(torch.ones(4, 4))
    before = parameters_digest([("w", weights)])
    with torch.no_grad():
        weights[1, 2] = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))
    assert parameters_digest([("w", weights)]) != before
    same_values = torch.ones(4, 4, dtype=torch.float64)
    assert parameters_digest([("w", same_values)]) != parameters_digest([("w", torch.ones(4, 4))])
    np.testing.assert_array_equal(
        Fingerprinter().tensor("w", same_values), Fingerprinter().tensor("w", torch.ones(4, 4))
    )


def test_a_stage_commits_to_its_start_each_inner_step_and_what_it_contributed() -> None:
    weights = torch.nn.Parameter(torch.zeros(3, 3))
    stage = StageCommitments([("w", weights)], run_id="r", cluster=1, stage=0)
    stage.begin(4)
    for i in (40, 41):
        with torch.no_grad():
            weights.add_(1.0)
        stage.after_inner_step(i)
    taken = stage.contributed()
    # Built once: whoever signs the step's commitments and whoever reports them get the same.
    assert stage.step_commitments() is taken
    assert [c.inner_step for c in taken.inner_steps] == [40, 41]
    assert taken.inner_steps[0].digest != taken.inner_steps[1].digest
    assert taken.contributed.digest == taken.inner_steps[1].digest
    assert taken.start.tensors["w"] == (0.0,) * 32
    expected = Fingerprinter().tensor("w", torch.full((3, 3), 2.0))
    np.testing.assert_array_equal(taken.contributed.tensors["w"], expected)
    np.testing.assert_array_equal(
        taken.inner_steps[1].fingerprint, expected
    )  # a one-tensor stage: the same sum
