"""DiLoCoX's compressed payload: low-rank factors in a shared basis, block-quantised, with
error feedback and an adaptive rank.

Per tensor of the stage shard, in order:

* matrices whose smaller side is at least ``min_compress_dim``: the factor ``M·Q`` (right basis
  ``Q``, ``m×r``) or ``Mᵀ·U`` (left basis ``U``, ``n×r``) of the error-fed pseudo-gradient ``M``,
  column by column (so a quantisation block never mixes singular directions of very different
  size), as int8 / int4 blocks (quantize.py), bf16 or fp32 (``bits``);
* everything else (1-D tensors, small matrices): bf16 -- their factors would be no smaller.

The round's basis side alternates (lowrank.py) and its rank is one number for the whole shard,
capped per matrix at half its smaller side. Both are fixed before the round from information
every cluster shares (the gathered payloads of an earlier round), so all payloads of a round
have the same length. Error feedback (Seide et al. 2014; Karimireddy et al. 2019, "Error
Feedback Fixes SignSGD"): each cluster keeps ``e ← M − decode(encode(M))`` and adds it to the
next pseudo-gradient, so nothing that compression drops is lost, only delayed.

Adaptive rank: after each round the averaged factors' singular values say how the captured
energy spreads over directions; the next rank is the smallest one holding ``rank_energy`` of
it -- it never grows on that signal. It grows (doubles, up to ``max_rank``) only when the mean
training loss has stalled for ``stall_rounds`` rounds. Early on, pseudo-gradients are dominated
by a few directions and the rank drops quickly; as training converges and the loss flattens
the rank is given back -- DiLoCoX's "aggressive early, gentler later" schedule, driven by
measurements instead of a fixed timetable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from trainer.outer.codec import check_payload
from trainer.outer.config import OuterConfig
from trainer.outer.errors import OuterStateError
from trainer.outer.lowrank import (
    basis_generator,
    choose_rank,
    factor_spectrum,
    next_basis,
    random_basis,
)
from trainer.outer.protocol import RoundSignals
from trainer.outer.quantize import dequantize, quantize, quantized_length

RIGHT, LEFT = 0, 1


@dataclass(frozen=True)
class _RoundPlan:
    """What every cluster uses for one round."""

    rank: int
    side: int
    """RIGHT: factors are ``M·Q`` (``n×r``); LEFT: factors are ``Mᵀ·U`` (``m×r``)."""
    bases: tuple[torch.Tensor | None, ...]
    """Per tensor: its orthonormal basis, or None for a tensor sent in bf16."""


class LowRankCodec:
    """A ``Codec`` (codec.py) for DiLoCoX. ``lag`` is how many rounds after a round's exchange
    its information can shape an encoding: 1 when blocking, 2 with the one-step-delay overlap
    (round t is encoded before round t−1 is applied)."""

    def __init__(self, config: OuterConfig, *, shapes: Sequence[torch.Size], seed: int, lag: int) -> None:
        self.config = config
        self.shapes = [torch.Size(s) for s in shapes]
        self.seed = seed
        self.lag = lag
        self.bits: int = config.bits
        self.compressed = [
            len(s) == 2 and min(s) >= config.min_compress_dim for s in self.shapes
        ]
        self.error = [torch.zeros(s, dtype=torch.float32) for s in self.shapes]
        self._rank = config.rank
        self._best_loss = math.inf
        self._stalled = 0
        self._plans: dict[int, _RoundPlan] = {
            r: self._random_plan(r, config.rank, RIGHT) for r in range(lag)
        }
        self.last_stats: dict[str, float] = {}
        self.encode_stats: dict[str, float] = {}

    # ----------------------------------------------------------------------------- Codec

    def rank_of(self, round: int) -> int:
        return self._plan(round).rank

    def payload_length(self, round: int) -> int:
        return sum(self._segment_lengths(self._plan(round)))

    def encode(self, round: int, pseudo_gradient: Sequence[torch.Tensor]) -> torch.Tensor:
        plan = self._plan(round)
        segments = []
        target_sq = residual_sq = 0.0
        for i, (delta, error) in enumerate(zip(pseudo_gradient, self.error, strict=True)):
            target = delta.to(torch.float32)
            if self.config.error_feedback == "buffer":
                target = target + error
            basis = plan.bases[i]
            if basis is None:
                sent = target.to(torch.bfloat16)
                segments.append(sent.reshape(-1).view(torch.uint8))
                decoded = sent.to(torch.float32)
            else:
                factor = _factor(target, basis, plan.side)
                data = self._encode_factor(factor)
                segments.append(data)
                shape = (int(factor.shape[0]), int(factor.shape[1]))
                decoded = _expand(self._decode_factor(data, shape), basis, plan.side)
            residual = target - decoded
            target_sq += float(target.double().pow(2).sum())
            residual_sq += float(residual.double().pow(2).sum())
            error.copy_(residual)
        self.encode_stats = {
            "compression_residual": math.sqrt(residual_sq / target_sq) if target_sq > 0 else 0.0,
            "error_feedback_norm": math.sqrt(residual_sq),
        }
        return torch.cat(segments)

    def residual(self) -> list[torch.Tensor] | None:
        """What the last ``encode`` could not send (None when error feedback is off)."""
        return None if self.config.error_feedback == "none" else self.error

    def coordinates(self, round: int, payload: torch.Tensor) -> list[torch.Tensor]:
        plan = self._plan(round)
        lengths = self._segment_lengths(plan)
        check_payload(payload, sum(lengths))
        out = []
        for i, data in enumerate(torch.split(payload, lengths)):
            basis = plan.bases[i]
            if basis is None:
                out.append(data.contiguous().view(torch.bfloat16).to(torch.float32).view(self.shapes[i]))
            else:
                out.append(self._decode_factor(data, self._factor_shape(i, plan)))
        return out

    def expand(self, round: int, coordinates: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        plan = self._plan(round)
        return [
            c if basis is None else _expand(c, basis, plan.side)
            for c, basis in zip(coordinates, plan.bases, strict=True)
        ]

    def project(self, round: int, dense: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        plan = self._plan(round)
        return [
            d if basis is None else _factor(d, basis, plan.side)
            for d, basis in zip(dense, plan.bases, strict=True)
        ]

    def finish_round(
        self, round: int, mean: Sequence[torch.Tensor] | None, signals: RoundSignals
    ) -> None:
        plan = self._plans.pop(round)
        target = round + self.lag
        self._track_stall(signals.mean_train_loss)
        if mean is None:  # every contribution was excluded: keep the basis as it was
            self._plans[target] = plan
            return
        spectra = {
            i: factor_spectrum(m) for i, m in enumerate(mean) if plan.bases[i] is not None
        }
        energies = torch.zeros(max(len(spectra), 1), plan.rank, dtype=torch.float64)
        for row, (energy, _) in enumerate(spectra.values()):
            energies[row, : energy.numel()] = energy
        rank = self._next_rank(energies)
        side = LEFT if plan.side == RIGHT else RIGHT
        bases: list[torch.Tensor | None] = []
        for i in range(len(self.shapes)):
            if i not in spectra:
                bases.append(None)
                continue
            energy, directions = spectra[i]
            generator = basis_generator(self.seed, target, i)
            bases.append(next_basis(directions, energy, self._capped(i, rank), generator))
        self._plans[target] = _RoundPlan(rank=rank, side=side, bases=tuple(bases))
        total = float(energies.sum())
        self.last_stats = {
            "rank_next": float(rank),
            "top_direction_energy": float(energies[:, 0].sum()) / total if total > 0 else 0.0,
        }

    def state_dict(self, prefix: str) -> dict[str, torch.Tensor]:
        state = {f"{prefix}error.{i}": e.clone() for i, e in enumerate(self.error)}
        state[f"{prefix}rank"] = torch.tensor(self._rank, dtype=torch.int64)
        state[f"{prefix}best_loss"] = torch.tensor(self._best_loss, dtype=torch.float64)
        state[f"{prefix}stalled"] = torch.tensor(self._stalled, dtype=torch.int64)
        for round, plan in self._plans.items():
            state[f"{prefix}plan.{round}.rank"] = torch.tensor(plan.rank, dtype=torch.int64)
            state[f"{prefix}plan.{round}.side"] = torch.tensor(plan.side, dtype=torch.int64)
            for i, basis in enumerate(plan.bases):
                if basis is not None:
                    state[f"{prefix}plan.{round}.basis.{i}"] = basis.clone()
        return state

    def load_state_dict(self, state: Mapping[str, torch.Tensor], prefix: str) -> None:
        try:
            for i, e in enumerate(self.error):
                e.copy_(state[f"{prefix}error.{i}"])
            self._rank = int(state[f"{prefix}rank"].item())
            self._best_loss = float(state[f"{prefix}best_loss"].item())
            self._stalled = int(state[f"{prefix}stalled"].item())
            rounds = sorted(
                {int(k.split(".")[-2]) for k in state if k.startswith(f"{prefix}plan.") and k.endswith(".rank")}
            )
            plans = {}
            for round in rounds:
                key = f"{prefix}plan.{round}"
                bases = tuple(
                    state[f"{key}.basis.{i}"].clone() if self.compressed[i] else None
                    for i in range(len(self.shapes))
                )
                plans[round] = _RoundPlan(
                    rank=int(state[f"{key}.rank"].item()), side=int(state[f"{key}.side"].item()), bases=bases
                )
        except KeyError as exc:
            raise OuterStateError(f"expected key {exc.args[0]!r} in the outer state, it is missing") from exc
        self._plans = plans

    # ----------------------------------------------------------------------------- helpers

    def _plan(self, round: int) -> _RoundPlan:
        if round not in self._plans:
            raise OuterStateError(
                f"expected a basis for round {round}; planned rounds are {sorted(self._plans)}"
            )
        return self._plans[round]

    def _random_plan(self, round: int, rank: int, side: int) -> _RoundPlan:
        bases: list[torch.Tensor | None] = []
        for i, shape in enumerate(self.shapes):
            if not self.compressed[i]:
                bases.append(None)
                continue
            rows = shape[1] if side == RIGHT else shape[0]
            bases.append(random_basis(rows, self._capped(i, rank), basis_generator(self.seed, round, i)))
        return _RoundPlan(rank=rank, side=side, bases=tuple(bases))

    def _capped(self, index: int, rank: int) -> int:
        return max(1, min(rank, min(self.shapes[index]) // 2))

    def _factor_shape(self, index: int, plan: _RoundPlan) -> tuple[int, int]:
        n, m = self.shapes[index]
        basis = plan.bases[index]
        assert basis is not None
        return (n if plan.side == RIGHT else m, basis.shape[1])

    def _segment_lengths(self, plan: _RoundPlan) -> list[int]:
        lengths = []
        for i, shape in enumerate(self.shapes):
            if plan.bases[i] is None:
                lengths.append(2 * shape.numel())
            else:
                rows, rank = self._factor_shape(i, plan)
                lengths.append(self._factor_bytes(rows * rank))
        return lengths

    def _factor_bytes(self, numel: int) -> int:
        if self.bits in (4, 8):
            return quantized_length(numel, bits=self.bits, block=self.config.quant_block)
        return numel * self.bits // 8

    def _encode_factor(self, factor: torch.Tensor) -> torch.Tensor:
        columns = factor.t().contiguous().reshape(-1)  # column-major: one direction per run
        if self.bits in (4, 8):
            return quantize(columns, bits=self.bits, block=self.config.quant_block)
        dtype = torch.bfloat16 if self.bits == 16 else torch.float32
        return columns.to(dtype).view(torch.uint8)

    def _decode_factor(self, data: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
        rows, rank = shape
        if self.bits in (4, 8):
            columns = dequantize(data, rows * rank, bits=self.bits, block=self.config.quant_block)
        else:
            dtype = torch.bfloat16 if self.bits == 16 else torch.float32
            columns = data.contiguous().view(dtype).to(torch.float32)
        return columns.view(rank, rows).t()

    def _track_stall(self, loss: float) -> None:
        if not math.isfinite(loss):
            return
        if loss < self._best_loss * (1.0 - self.config.stall_tolerance):
            self._best_loss, self._stalled = loss, 0
        else:
            self._stalled += 1

    def _next_rank(self, energies: torch.Tensor) -> int:
        if not self.config.adaptive_rank:
            return self._rank
        if self._stalled >= self.config.stall_rounds:
            self._rank = min(self.config.max_rank, 2 * self._rank)
            self._stalled = 0
        else:
            self._rank = choose_rank(
                energies, fraction=self.config.rank_energy, lower=self.config.min_rank, upper=self._rank
            )
        return self._rank


def _factor(matrix: torch.Tensor, basis: torch.Tensor, side: int) -> torch.Tensor:
    """``M·Q`` (RIGHT, ``n×r``) or ``Mᵀ·U`` (LEFT, ``m×r``)."""
    return matrix @ basis if side == RIGHT else matrix.t() @ basis


def _expand(factor: torch.Tensor, basis: torch.Tensor, side: int) -> torch.Tensor:
    """``P·Qᵀ`` (RIGHT) or ``U·Rᵀ`` (LEFT): the projection of ``M`` onto the basis."""
    return factor @ basis.t() if side == RIGHT else basis @ factor.t()
