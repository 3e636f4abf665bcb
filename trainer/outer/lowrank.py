"""Shared orthonormal bases for low-rank compression, refreshed by power iteration.

PowerSGD (Vogels et al., NeurIPS 2019, Algorithm 1) approximates a gradient matrix ``M`` by
``P·Qᵀ`` with ``P = M·Q`` and refreshes ``Q`` by one power-iteration step per use, warm-started
from the previous step. Because every worker uses the *same* ``Q``, the workers' factors live in
one basis and their average is the factor of the averaged matrix: the projection is linear,
``mean_i(M_i·Q) = mean_i(M_i)·Q``. DiLoCoX (Qi et al. 2025, arXiv 2506.21263) compresses
pseudo-gradients the same way, with quantised factors.

PowerSGD needs two all-reduces per step (``P`` then ``Q``); our protocol has one all-gather per
round, so a round projects on bases fixed *before* it and the power iteration advances between
rounds. A round has a left basis ``U`` (``n×r``), a right basis ``V`` (``m×r``) or both, and
every cluster sends the coordinates of the orthogonal projection of its ``M`` on

    S = { U·X + Y·Vᵀ }:   A = M·V  (n×r),   B = Uᵀ·(M − A·Vᵀ)  (r×m),   P_S(M) = A·Vᵀ + U·B

(with one basis, only ``A`` or only ``B``). The two parts are orthogonal, so inner products of
projections equal inner products of the concatenated coordinates -- the anomaly checks use
that. After the round, the averaged projection ``M̂ = Ā·Vᵀ + U·B̄`` has its column space in
``[U, Ā]`` and its row space in ``[V, B̄ᵀ]``; a QR of each and an SVD of the small core give
``M̂``'s singular vectors: the top ``r`` of them are the next bases (one block power-iteration
step on both sides, warm-started from the last bases) and its singular values ``σ_j²`` are the
spectral energies the rank rule reads. With one basis per round the side alternates (the left
singular vectors of ``Ā·Vᵀ`` become the next round's ``U``, and so on).

Everything runs in float64 on ``k×2r`` and ``2r×2r`` matrices, with fixed seeds derived from the
run seed, the round and the tensor index, so every cluster computes identical bases.
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


def projection_spectrum(
    left: torch.Tensor | None,
    right: torch.Tensor | None,
    A: torch.Tensor | None,
    B: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Singular triplets of ``M̂ = A·Vᵀ + U·B`` (the averaged projection) without forming it:
    returns the energies ``σ_j²`` (descending), the left and the right singular vectors."""
    col_parts = [t for t in (left, A) if t is not None]
    row_parts = [t for t in (right, None if B is None else B.T) if t is not None]
    QL, _ = torch.linalg.qr(torch.cat([t.to(torch.float64) for t in col_parts], dim=1))
    QR, _ = torch.linalg.qr(torch.cat([t.to(torch.float64) for t in row_parts], dim=1))
    core = torch.zeros(QL.shape[1], QR.shape[1], dtype=torch.float64)
    if A is not None and right is not None:
        core += (QL.T @ A.to(torch.float64)) @ (right.to(torch.float64).T @ QR)
    if B is not None and left is not None:
        core += (QL.T @ left.to(torch.float64)) @ (B.to(torch.float64) @ QR)
    u, sigma, vh = torch.linalg.svd(core, full_matrices=False)
    # Fix the sign of each singular pair (largest |component| of u positive): unique output.
    flip = torch.where(u.gather(0, u.abs().argmax(dim=0, keepdim=True)) < 0, -1.0, 1.0)
    return sigma.pow(2), QL @ (u * flip), QR @ (vh.T * flip)


def next_basis(
    directions: torch.Tensor, energies: torch.Tensor, rank: int, generator: torch.Generator
) -> torch.Tensor:
    """The orthonormal ``k×rank`` basis spanned by the leading singular ``directions``.
    Directions with no energy, and extra ones when ``rank`` exceeds what there is, are seeded
    random directions (they may pick up new signal in later rounds)."""
    k, available = directions.shape
    keep = min(rank, available)
    top = float(energies[0]) if energies.numel() else 0.0
    alive = energies[:keep] > 1e-12 * top if top > 0 else torch.zeros(keep, dtype=torch.bool)
    chosen = torch.randn(k, rank, generator=generator, dtype=torch.float64)
    chosen[:, :keep] = torch.where(
        alive[None, :], directions[:, :keep].to(torch.float64), chosen[:, :keep]
    )
    return _orthonormal(chosen).to(torch.float32)


def choose_rank(energies: torch.Tensor, *, fraction: float, lower: int, upper: int) -> int:
    """Smallest rank whose leading directions hold ``fraction`` of the energy (summed over every
    compressed matrix: ``energies`` is ``(matrices, r)``), clamped to ``[lower, upper]``."""
    per_direction = energies.to(torch.float64).sum(dim=0)
    total = float(per_direction.sum())
    if total <= 0.0:
        return lower
    cumulative = torch.cumsum(per_direction, dim=0) / total
    needed = (
        int(torch.searchsorted(cumulative, torch.tensor(fraction, dtype=torch.float64)).item()) + 1
    )
    return max(lower, min(upper, needed))


def _orthonormal(columns: torch.Tensor) -> torch.Tensor:
    """Householder QR with the sign fixed (diag(R) >= 0) so the result is unique.

    Returned row-major: LAPACK hands Q back column-major, and a basis restored from a checkpoint
    is row-major -- products with the two layouts can round differently, so a run resumed (or a
    step re-executed) from a saved state would drift from the uninterrupted one by an ulp."""
    q, r = torch.linalg.qr(columns, mode="reduced")
    signs = torch.where(torch.diagonal(r) < 0, -1.0, 1.0).to(q.dtype)
    result: torch.Tensor = (q * signs[None, :]).contiguous()
    return result
