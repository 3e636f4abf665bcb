"""Shared orthonormal bases for low-rank compression, refreshed by power iteration.

PowerSGD (Vogels et al., NeurIPS 2019, Algorithm 1) approximates a gradient matrix ``M`` by
``P·Qᵀ`` with ``P = M·Q`` and refreshes ``Q`` by one power-iteration step per use, warm-started
from the previous step. Because every worker uses the *same* ``Q``, the workers' ``P`` factors
live in one basis and their average is the factor of the averaged matrix: the projection is
linear, ``mean_i(M_i·Q) = mean_i(M_i)·Q``. DiLoCoX (Qi et al. 2025, arXiv 2506.21263)
compresses pseudo-gradients the same way, with quantised factors.

PowerSGD needs two all-reduces per step (``P`` then ``Q``); our protocol has one all-gather per
round. So the power iteration is spread over rounds: a round uses either a right basis ``Q``
(``m×r``; every cluster sends ``M_i·Q``, ``n×r``) or a left basis ``U`` (``n×r``; every cluster
sends ``M_iᵀ·U``, ``m×r``). From the averaged factor of one round the next basis on the other
side is the orthonormalised factor -- exactly the two half-steps of PowerSGD's power iteration,
each applied to a fresh (error-fed) pseudo-gradient. The decoded approximation is the
orthogonal projection ``M·Q·Qᵀ`` or ``U·Uᵀ·M``; what it misses stays in the error feedback.

The refresh also orders the new basis by the singular values of the averaged factor: the
eigenvalues of its small ``r×r`` Gram matrix are the spectral energies the rank rule reads.
All of this runs in float64 on ``r×r`` or ``k×r`` matrices (cheap), with fixed seeds derived
from the run seed, the round and the tensor index, so every cluster computes identical bases.
"""

from __future__ import annotations

import hashlib

import torch


def basis_generator(seed: int, round: int, index: int) -> torch.Generator:
    """A CPU generator every cluster seeds identically for (run seed, round, tensor index)."""
    digest = hashlib.sha256(f"veritrain.outer.basis:{seed}:{round}:{index}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def random_basis(rows: int, rank: int, generator: torch.Generator) -> torch.Tensor:
    """An orthonormal ``rows×rank`` basis (fp32) drawn from a Gaussian (the PowerSGD init)."""
    gaussian = torch.randn(rows, rank, generator=generator, dtype=torch.float64)
    return _orthonormal(gaussian).to(torch.float32)


def factor_spectrum(mean_factor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The averaged factor ``F`` (``k×r``) of a round as its singular directions: returns the
    energies ``σ_j²`` (descending, length ``r``) and ``F·V`` (``k×r``, orthogonal columns of norm
    ``σ_j``, same order), from the eigen-decomposition of the small Gram matrix ``FᵀF``."""
    F = mean_factor.to(torch.float64)
    energies, vectors = torch.linalg.eigh(F.T @ F)  # ascending
    order = torch.argsort(energies, descending=True, stable=True)
    return energies[order].clamp_(min=0.0), F @ vectors[:, order]


def next_basis(
    directions: torch.Tensor, energies: torch.Tensor, rank: int, generator: torch.Generator
) -> torch.Tensor:
    """One power-iteration half-step: the orthonormal ``k×rank`` basis spanned by the leading
    ``directions`` (from :func:`factor_spectrum`). Directions with no energy, and extra ones
    when ``rank`` exceeds what the factor had, are seeded random directions (they may pick up
    new signal in later rounds)."""
    k, r = directions.shape
    keep = min(rank, r)
    top = float(energies[0]) if r else 0.0
    alive = energies[:keep] > 1e-12 * top if top > 0 else torch.zeros(keep, dtype=torch.bool)
    chosen = torch.randn(k, rank, generator=generator, dtype=torch.float64)
    chosen[:, :keep] = torch.where(alive[None, :], directions[:, :keep], chosen[:, :keep])
    return _orthonormal(chosen).to(torch.float32)


def choose_rank(energies: torch.Tensor, *, fraction: float, lower: int, upper: int) -> int:
    """Smallest rank whose leading directions hold ``fraction`` of the energy (summed over every
    compressed matrix: ``energies`` is ``(matrices, r)``), clamped to ``[lower, upper]``."""
    per_direction = energies.to(torch.float64).sum(dim=0)
    total = float(per_direction.sum())
    if total <= 0.0:
        return lower
    cumulative = torch.cumsum(per_direction, dim=0) / total
    needed = int(torch.searchsorted(cumulative, torch.tensor(fraction, dtype=torch.float64)).item()) + 1
    return max(lower, min(upper, needed))


def _orthonormal(columns: torch.Tensor) -> torch.Tensor:
    """Householder QR with the sign fixed (diag(R) >= 0) so the result is unique."""
    q, r = torch.linalg.qr(columns, mode="reduced")
    signs = torch.where(torch.diagonal(r) < 0, -1.0, 1.0).to(q.dtype)
    result: torch.Tensor = q * signs[None, :]
    return result
