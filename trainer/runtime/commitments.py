"""Per-inner-step commitments of one process's stage (records/commitments.py is the format).

After every inner step the process takes two measurements of its stage's parameters (the ones
its outer algorithm owns, in their order: a last stage's copy of a tied embedding is left out,
stage 0 holds the matrix):

* the **digest**: SHA-256 over, for each parameter in order, its name (UTF-8), a 0x00 byte, its
  dtype's name (``float32``), a 0x00 byte, its shape as comma-separated sizes, a 0x00 byte and
  its elements' bytes (C order, little-endian). Equal digests mean bit-equal parameters, the
  test under a bitwise policy;
* the **fingerprint**: a fixed random projection to k numbers (a count sketch, Charikar et al.
  2002; as a Johnson-Lindenstrauss map, Clarkson & Woodruff 2013). For a tensor named n with
  elements x_0 .. x_{N-1} (C order): key = the first 8 bytes of SHA-256("veritrain-fingerprint:"
  + n) read little-endian; h_i = the (i+1)-th output of SplitMix64 seeded with key (Steele et
  al. 2014: z = key + (i+1)·0x9E3779B97F4A7C15 mod 2^64, then z ^= z >> 30, z *= 0xBF58476D1CE4E5B9,
  z ^= z >> 27, z *= 0x94D049BB133111EB, z ^= z >> 31); x_i goes to bucket h_i mod k with sign
  +1 if h_i < 2^63 else -1; the tensor's fingerprint f_j is the float64 sum of its signed
  elements in bucket j, and a stage's fingerprint is the sum of its tensors' fingerprints. The
  map is linear, so fingerprint(θ′) − fingerprint(θ) is the fingerprint of θ′ − θ, and its norm
  estimates ‖θ′ − θ‖ (E‖Sx‖² = ‖x‖²): relative distances between parameter vectors can be
  measured from fingerprints alone (veritrain/audit/distance.py).

A fingerprint is not binding: anyone can find parameters with a given fingerprint. It localises
a dispute between honest executions that drifted apart and a forgery that did not try to hide
in the projection's null space; the digest, the contribution digest and the per-tensor
comparison of checkpoints are what bind (docs/auditing.md, "What commitments prove").

Cost per inner step: one pass over the stage's parameters on CPU for each measurement; the
bucket and sign of every element are computed once per process and kept (16 bytes per
parameter), which is nothing at the CPU presets' sizes. On a GPU the parameters are copied to
the host once per inner step for both measurements: gigabytes at qwen2-1.5b, and 16 bytes per
parameter of host memory for the buckets (docs/trainer.md, "On GPUs": computing the
measurements on the device is not done yet).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import torch

from records.commitments import (
    FINGERPRINT_DIMS,
    Fingerprint,
    InnerCommitments,
    InnerStepCommitment,
    ParameterCommitment,
)

NamedTensors = Sequence[tuple[str, torch.Tensor]]

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _cpu_array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu").contiguous().numpy()


def parameters_digest(named: NamedTensors) -> str:
    """The digest of the module docstring."""
    hasher = hashlib.sha256()
    for name, tensor in named:
        array = _cpu_array(tensor)
        shape = ",".join(str(size) for size in array.shape)
        dtype = str(tensor.dtype).removeprefix("torch.")
        hasher.update(f"{name}\0{dtype}\0{shape}\0".encode())
        hasher.update(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
    return hasher.hexdigest()


def _buckets(name: str, count: int, dims: int) -> tuple[np.ndarray, np.ndarray]:
    """(bucket, sign) of every element of a tensor named ``name`` with ``count`` elements."""
    key = np.uint64(
        int.from_bytes(
            hashlib.sha256(f"veritrain-fingerprint:{name}".encode()).digest()[:8], "little"
        )
    )
    z = key + (np.arange(1, count + 1, dtype=np.uint64) * _GAMMA)  # wraps mod 2^64
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    bucket = (z % np.uint64(dims)).astype(np.intp)
    sign = np.where(z >> np.uint64(63) == 0, 1.0, -1.0)
    return bucket, sign


class Fingerprinter:
    """Computes fingerprints, keeping each tensor's buckets and signs (they depend only on its
    name, size and k)."""

    def __init__(self, dims: int = FINGERPRINT_DIMS) -> None:
        self.dims = dims
        self._cache: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}

    def tensor(self, name: str, tensor: torch.Tensor) -> np.ndarray:
        """The fingerprint of one tensor: ``dims`` float64 numbers."""
        values = _cpu_array(tensor).reshape(-1)
        key = (name, values.size)
        if key not in self._cache:
            self._cache[key] = _buckets(name, values.size, self.dims)
        bucket, sign = self._cache[key]
        # float32 x float64 signs gives the float64 products directly (widening is exact, and so
        # is a product by +-1): the same weights as converting first, one pass fewer.
        return np.bincount(bucket, weights=values * sign, minlength=self.dims)

    def stage(self, named: NamedTensors) -> np.ndarray:
        """The fingerprint of a stage: the sum of its tensors', in order."""
        total = np.zeros(self.dims, dtype=np.float64)
        for name, tensor in named:
            total += self.tensor(name, tensor)
        return total


def as_fingerprint(values: np.ndarray) -> Fingerprint:
    return tuple(float(v) for v in values)


class StageCommitments:
    """The commitments one process makes for its stage, outer step by outer step."""

    def __init__(self, named: NamedTensors, *, run_id: str, cluster: int, stage: int) -> None:
        self.named = list(named)
        """The live parameters (they change in place as the process trains)."""
        self.run_id, self.cluster, self.stage = run_id, cluster, stage
        self.fingerprinter = Fingerprinter()
        self._step: int | None = None
        self._start: ParameterCommitment | None = None
        self._inner: list[InnerStepCommitment] = []
        self._complete: InnerCommitments | None = None

    def begin(self, step: int) -> None:
        """Commit to the parameters outer step ``step``'s inner steps start from."""
        self._step, self._inner, self._complete = step, [], None
        self._start = self._tensors()

    def _on_host(self) -> list[tuple[str, torch.Tensor]]:
        """The parameters on the host, read once for both measurements (on a GPU one copy
        off the device per measurement instead of two; on a CPU no copy at all)."""
        return [(name, t.detach().to("cpu")) for name, t in self.named]

    def _tensors(self) -> ParameterCommitment:
        host = self._on_host()
        return ParameterCommitment(
            digest=parameters_digest(host),
            tensors={name: as_fingerprint(self.fingerprinter.tensor(name, t)) for name, t in host},
        )

    def after_inner_step(self, inner_step: int) -> None:
        """Commit to the parameters as global inner step ``inner_step`` left them."""
        host = self._on_host()
        self._inner.append(
            InnerStepCommitment(
                inner_step=inner_step,
                digest=parameters_digest(host),
                fingerprint=as_fingerprint(self.fingerprinter.stage(host)),
            )
        )

    def contributed(self) -> InnerCommitments:
        """Commit to the parameters the contribution is computed from, tensor by tensor: the
        step's commitments are then complete, built here once for whoever signs or reports
        them (``step_commitments``)."""
        if self._step is None or self._start is None or not self._inner:
            raise RuntimeError("commitments completed before an outer step's inner steps")
        self._complete = InnerCommitments(
            run_id=self.run_id,
            step=self._step,
            cluster=self.cluster,
            stage=self.stage,
            start=self._start,
            inner_steps=tuple(self._inner),
            contributed=self._tensors(),
            dims=self.fingerprinter.dims,
        )
        return self._complete

    def step_commitments(self) -> InnerCommitments:
        """The outer step's commitments, once its contribution is committed to."""
        if self._complete is None:
            raise RuntimeError(
                "commitments taken before an outer step's inner steps and contribution"
            )
        return self._complete
