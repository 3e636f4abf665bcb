"""DiLoCoX's compressed payload: low-rank projections on shared bases, block-quantised, with
error feedback and an adaptive rank.

Per tensor of the stage shard, in order:

* matrices whose smaller side is at least ``min_compress_dim``: the coordinates of the
  error-fed pseudo-gradient ``M`` projected on the round's shared bases (lowrank.py): ``A = M·V``
  column by column, then ``B = Uᵀ·(M − A·Vᵀ)`` row by row -- so a quantisation block never mixes
  singular directions of very different size -- as int8 / int4 / int2 blocks (quantize.py), bf16 or
  fp32 (``bits``). By default a round has one basis whose side alternates (``n·r`` or ``m·r``
  elements); with ``two_sided`` it has both and costs ``(n+m)·r``;
* everything else (1-D tensors, small matrices): whole, in bf16 or (``dense_bits`` 8) int8
  blocks -- their factors would be no smaller.

The round's bases and rank (one number for the shard, capped per matrix at half its smaller
side) are fixed before the round from information every cluster shares -- the gathered payloads
of an earlier round -- so all payloads of a round have the same length. Error feedback (Seide
et al. 2014; Karimireddy et al. 2019): the residual ``M − decode(encode(M))`` is either kept in
the cluster's parameters (``"local"``, see algorithm.py) or added to the next pseudo-gradient
(``"buffer"``); nothing compression drops is lost, only delayed.

Adaptive rank: after each round the averaged projection's singular values say how the captured
energy spreads over directions; the next rank is the smallest one holding ``rank_energy`` of
it -- it never grows on that signal. It grows (doubles, up to ``max_rank``) only when the mean
training loss has stalled for ``stall_rounds`` rounds, and the grown rank becomes the floor the
energy rule may not go below. Early on, pseudo-gradients are dominated
by a few directions and the rank drops quickly; as training converges and the loss flattens the
rank is given back -- DiLoCoX's "aggressive early, gentler later" schedule, driven by
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
    next_basis,
    projection_spectrum,
    random_basis,
)
from trainer.outer.protocol import RoundSignals
from trainer.outer.quantize import decode, encode, encoded_length

Bases = tuple[torch.Tensor | None, torch.Tensor | None]
"""(U, V): left basis ``n×r`` and right basis ``m×r`` of one matrix; either may be absent."""


@dataclass(frozen=True)
class _RoundPlan:
    """What every cluster uses for one round."""

    rank: int
    bases: tuple[Bases | None, ...]
    """Per tensor: its bases, or None for a tensor sent whole (``dense_bits``)."""


class LowRankCodec:
    """A ``Codec`` (codec.py) for DiLoCoX. ``lag`` is how many rounds after a round's exchange
    its information can shape an encoding: 1 when blocking, 2 with the one-step-delay overlap
    (round t is encoded before round t−1 is applied)."""

    def __init__(
        self,
        config: OuterConfig,
        *,
        shapes: Sequence[torch.Size],
        seed: int,
        lag: int,
        device: torch.device | None = None,
    ) -> None:
        self.config = config
        self.device = device or torch.device("cpu")
        self.shapes = [torch.Size(s) for s in shapes]
        self.seed = seed
        self.lag = lag
        self.bits: int = config.bits
        self.compressed = [len(s) == 2 and min(s) >= config.min_compress_dim for s in self.shapes]
        self.error = [torch.zeros(s, dtype=torch.float32, device=self.device) for s in self.shapes]
        self._rank = config.rank
        self._best_loss = math.inf
        self._stalled = 0
        self._floor = config.min_rank  # raised when a stall gives rank back
        # Rounds before the first refresh use seeded random bases (one-sided: the right side).
        self._plans: dict[int, _RoundPlan] = {
            r: self._random_plan(r, config.rank) for r in range(lag)
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
            bases = plan.bases[i]
            if bases is None:
                whole = self._encode_dense(target)
                segments.append(whole)
                decoded = self._decode_dense(whole, i)
            else:
                A, B = _project(target, bases)
                data = [
                    self._encode_values(A.t()) if A is not None else None,
                    self._encode_values(B) if B is not None else None,
                ]
                segments.extend(d for d in data if d is not None)
                decoded = self._expand_one(
                    self._decode_coordinates(
                        torch.cat([d for d in data if d is not None]), i, plan
                    ),
                    i,
                    plan,
                )
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
            if plan.bases[i] is None:
                out.append(self._decode_dense(data, i))
            else:
                out.append(self._decode_coordinates(data, i, plan))
        return out

    def expand(self, round: int, coordinates: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        plan = self._plan(round)
        return [self._expand_one(c, i, plan) for i, c in enumerate(coordinates)]

    def project(self, round: int, dense: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        plan = self._plan(round)
        out = []
        for d, bases in zip(dense, plan.bases, strict=True):
            if bases is None:
                out.append(d)
                continue
            A, B = _project(d.to(torch.float32), bases)
            out.append(
                torch.cat(
                    [
                        t.reshape(-1)
                        for t in ((A.t() if A is not None else None), B)
                        if t is not None
                    ]
                )
            )
        return out

    def finish_round(
        self, round: int, mean: Sequence[torch.Tensor] | None, signals: RoundSignals
    ) -> None:
        plan = self._plans.pop(round)
        target = round + self.lag
        self._track_stall(signals.mean_train_loss)
        if mean is None:  # every contribution was excluded: keep the bases as they were
            self._plans[target] = plan
            return
        spectra = {}
        for i, bases in enumerate(plan.bases):
            if bases is not None:
                # Small matrices, on the CPU in float64: the same bits on every cluster.
                A, B = (_cpu(t) for t in self._split(mean[i], i, plan))
                spectra[i] = projection_spectrum(_cpu(bases[0]), _cpu(bases[1]), A, B)
        width = max((e.numel() for e, _, _ in spectra.values()), default=1)
        energies = torch.zeros(max(len(spectra), 1), width, dtype=torch.float64)
        for row, (energy, _, _) in enumerate(spectra.values()):
            energies[row, : energy.numel()] = energy
        rank = self._next_rank(energies)
        new_bases: list[Bases | None] = []
        for i, bases in enumerate(plan.bases):
            if bases is None:
                new_bases.append(None)
                continue
            energy, left_dirs, right_dirs = spectra[i]
            r = self._capped(i, rank)
            generator = basis_generator(self.seed, target, i)
            # Two-sided: both bases advance. One-sided: the other side takes over.
            want_left = self.config.two_sided or bases[0] is None
            want_right = self.config.two_sided or bases[1] is None
            new_bases.append(
                (
                    next_basis(left_dirs, energy, r, generator).to(self.device)
                    if want_left
                    else None,
                    next_basis(right_dirs, energy, r, generator).to(self.device)
                    if want_right
                    else None,
                )
            )
        self._plans[target] = _RoundPlan(rank=rank, bases=tuple(new_bases))
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
        state[f"{prefix}rank_floor"] = torch.tensor(self._floor, dtype=torch.int64)
        for round, plan in self._plans.items():
            state[f"{prefix}plan.{round}.rank"] = torch.tensor(plan.rank, dtype=torch.int64)
            for i, bases in enumerate(plan.bases):
                for side, basis in zip(("left", "right"), bases or (None, None), strict=True):
                    if basis is not None:
                        state[f"{prefix}plan.{round}.{side}.{i}"] = basis.clone()
        return state

    def load_state_dict(self, state: Mapping[str, torch.Tensor], prefix: str) -> None:
        try:
            for i, e in enumerate(self.error):
                e.copy_(state[f"{prefix}error.{i}"])  # copy_ moves it to this codec's device
            self._rank = int(state[f"{prefix}rank"].item())
            self._best_loss = float(state[f"{prefix}best_loss"].item())
            self._stalled = int(state[f"{prefix}stalled"].item())
            self._floor = int(state[f"{prefix}rank_floor"].item())
        except KeyError as exc:
            raise OuterStateError(
                f"expected key {exc.args[0]!r} in the outer state, it is missing"
            ) from exc
        rounds = sorted(
            {
                int(k.split(".")[-2])
                for k in state
                if k.startswith(f"{prefix}plan.") and k.endswith(".rank")
            }
        )
        plans = {}
        for round in rounds:
            key = f"{prefix}plan.{round}"
            bases: list[Bases | None] = []
            for i in range(len(self.shapes)):
                left, right = state.get(f"{key}.left.{i}"), state.get(f"{key}.right.{i}")
                if self.compressed[i] and left is None and right is None:
                    raise OuterStateError(
                        f"expected a basis {key}.left.{i} or {key}.right.{i}, none found"
                    )
                bases.append(
                    (
                        None if left is None else left.to(self.device, copy=True),
                        None if right is None else right.to(self.device, copy=True),
                    )
                    if self.compressed[i]
                    else None
                )
            plans[round] = _RoundPlan(rank=int(state[f"{key}.rank"].item()), bases=tuple(bases))
        self._plans = plans

    # ----------------------------------------------------------------- owner-reduce segments
    # (trainer/outer/owner_reduce.py: a round's payload as one segment per tensor, so that an
    # owner can decode, average and re-encode the tensors it owns without the rest)

    def segment_lengths(self, round: int) -> list[int]:
        """Bytes of each tensor's segment of a ``round`` payload, in parameter order."""
        return self._segment_lengths(self._plan(round))

    def segment_coordinates(self, round: int, index: int, data: torch.Tensor) -> torch.Tensor:
        """Tensor ``index``'s segment of a ``round`` payload -> its coordinates (what
        ``coordinates`` gives for that tensor)."""
        plan = self._plan(round)
        check_payload(data, self._segment_lengths(plan)[index])
        if plan.bases[index] is None:
            return self._decode_dense(data, index)
        return self._decode_coordinates(data, index, plan)

    def encode_segment(self, round: int, index: int, coordinates: torch.Tensor) -> torch.Tensor:
        """Coordinates of tensor ``index`` (e.g. a mean) -> its segment, quantised as a
        contribution's is (``bits`` for factors, ``dense_bits`` for tensors sent whole)."""
        plan = self._plan(round)
        if plan.bases[index] is None:
            return self._encode_dense(coordinates)
        flat, parts, offset = coordinates.reshape(-1), [], 0
        for numel in self._part_sizes(index, plan):
            if numel:
                parts.append(self._encode_values(flat[offset : offset + numel]))
                offset += numel
        return torch.cat(parts)

    # ----------------------------------------------------------------------------- helpers

    def _plan(self, round: int) -> _RoundPlan:
        if round not in self._plans:
            raise OuterStateError(
                f"expected a basis for round {round}; planned rounds are {sorted(self._plans)}"
            )
        return self._plans[round]

    def _random_plan(self, round: int, rank: int) -> _RoundPlan:
        bases: list[Bases | None] = []
        for i, (n, *rest) in enumerate(self.shapes):
            if not self.compressed[i]:
                bases.append(None)
                continue
            m, r = rest[0], self._capped(i, rank)
            generator = basis_generator(self.seed, round, i)
            right = random_basis(m, r, generator).to(self.device)
            left = random_basis(n, r, generator).to(self.device) if self.config.two_sided else None
            bases.append((left, right))
        return _RoundPlan(rank=rank, bases=tuple(bases))

    def _capped(self, index: int, rank: int) -> int:
        return max(1, min(rank, min(self.shapes[index]) // 2))

    def _part_sizes(self, index: int, plan: _RoundPlan) -> tuple[int, int]:
        """Elements of A (``n×r``) and of B (``r×m``) for one matrix; 0 for an absent part."""
        bases = plan.bases[index]
        assert bases is not None
        n, m = self.shapes[index]
        left, right = bases
        return (
            n * right.shape[1] if right is not None else 0,
            m * left.shape[1] if left is not None else 0,
        )

    def _segment_lengths(self, plan: _RoundPlan) -> list[int]:
        lengths = []
        for i, shape in enumerate(self.shapes):
            if plan.bases[i] is None:
                lengths.append(self._dense_bytes(shape.numel()))
            else:
                lengths.append(sum(self._values_bytes(k) for k in self._part_sizes(i, plan) if k))
        return lengths

    # Factor values travel at ``bits``; tensors sent whole (1-D, small matrices) at
    # ``dense_bits``: bf16, or int8 blocks.

    def _values_bytes(self, numel: int) -> int:
        return encoded_length(numel, bits=self.bits, block=self.config.quant_block)

    def _encode_values(self, values: torch.Tensor) -> torch.Tensor:
        return encode(values.contiguous(), bits=self.bits, block=self.config.quant_block)

    def _decode_values(self, data: torch.Tensor, numel: int) -> torch.Tensor:
        return decode(data, numel, bits=self.bits, block=self.config.quant_block)

    def _dense_bytes(self, numel: int) -> int:
        return encoded_length(numel, bits=self.config.dense_bits, block=self.config.quant_block)

    def _encode_dense(self, values: torch.Tensor) -> torch.Tensor:
        return encode(values, bits=self.config.dense_bits, block=self.config.quant_block)

    def _decode_dense(self, data: torch.Tensor, index: int) -> torch.Tensor:
        shape = self.shapes[index]
        return decode(
            data, shape.numel(), bits=self.config.dense_bits, block=self.config.quant_block
        ).view(shape)

    def _decode_coordinates(self, data: torch.Tensor, index: int, plan: _RoundPlan) -> torch.Tensor:
        """Payload segment of one matrix -> its coordinates, ``A`` column-major then ``B``."""
        parts, offset = [], 0
        for numel in self._part_sizes(index, plan):
            if numel:
                size = self._values_bytes(numel)
                parts.append(self._decode_values(data[offset : offset + size], numel))
                offset += size
        return torch.cat(parts)

    def _split(
        self, coordinates: torch.Tensor, index: int, plan: _RoundPlan
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Coordinates -> (A ``n×r``, B ``r×m``)."""
        n, m = self.shapes[index]
        a_numel, b_numel = self._part_sizes(index, plan)
        A = coordinates[:a_numel].view(-1, n).t() if a_numel else None  # stored column-major
        B = coordinates[a_numel:].view(-1, m) if b_numel else None
        return A, B

    def _expand_one(self, coordinates: torch.Tensor, index: int, plan: _RoundPlan) -> torch.Tensor:
        bases = plan.bases[index]
        if bases is None:
            return coordinates
        left, right = bases
        A, B = self._split(coordinates, index, plan)
        out = torch.zeros(self.shapes[index], dtype=torch.float32, device=coordinates.device)
        if A is not None and right is not None:
            out += A @ right.t()
        if B is not None and left is not None:
            out += left @ B
        return out

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
            # A stall gives rank back for good: the energy rule may not take it away again.
            self._rank = min(self.config.max_rank, 2 * self._rank)
            self._floor = self._rank
            self._stalled = 0
        else:
            self._rank = choose_rank(
                energies, fraction=self.config.rank_energy, lower=self._floor, upper=self._rank
            )
        return self._rank


def _cpu(tensor: torch.Tensor | None) -> torch.Tensor | None:
    return None if tensor is None else tensor.cpu()


def _project(matrix: torch.Tensor, bases: Bases) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Coordinates of the projection on ``{U·X + Y·Vᵀ}``: ``A = M·V`` and
    ``B = Uᵀ·(M − A·Vᵀ)`` (orthogonal parts; lowrank.py)."""
    left, right = bases
    A = matrix @ right if right is not None else None
    rest = matrix - A @ right.t() if A is not None and right is not None else matrix
    B = left.t() @ rest if left is not None else None
    return A, B
