"""How pseudo-gradients become payload bytes and back: the ``Codec`` seam and the plain
(uncompressed fp32) codec of DiLoCo.

A codec maps a cluster's pseudo-gradient to a 1-D ``uint8`` payload, and a payload to
*coordinates*: fp32 tensors in which inner products equal those of the decoded pseudo-gradients
in parameter space (for fp32 the coordinates are the tensors themselves; for the low-rank codec
they are the factors ``P`` of ``P·Qᵀ`` with an orthonormal ``Q`` shared by every cluster). The
algorithm sums coordinates in cluster order, runs the anomaly checks on them and expands the
sum to parameter space once. Multi-byte values are stored little-endian (the native order of
every platform torch supports; checked at import).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Protocol

import torch

from trainer.outer.errors import PayloadError
from trainer.outer.protocol import RoundSignals
from trainer.outer.quantize import float_view

if sys.byteorder != "little":  # pragma: no cover - no such torch platform today
    raise ImportError("trainer.outer payloads are little-endian; this host is big-endian")


class Codec(Protocol):
    bits: int
    """Bits per transmitted element (32 = fp32, 16 = bf16, 8 / 4 = block-quantised)."""

    @property
    def last_stats(self) -> Mapping[str, float]:
        """Numbers about the last ``finish_round`` worth reporting (next rank, energy spread)."""
        ...

    @property
    def encode_stats(self) -> Mapping[str, float]:
        """Numbers about the last ``encode`` (relative residual, error-feedback norm)."""
        ...

    def rank_of(self, round: int) -> int:
        """Low-rank rank used in ``round`` (0 = uncompressed)."""
        ...

    def payload_length(self, round: int) -> int:
        """Bytes of every cluster's payload for ``round`` (identical on every cluster)."""
        ...

    def encode(self, round: int, pseudo_gradient: Sequence[torch.Tensor]) -> torch.Tensor:
        """This cluster's payload; updates the error feedback if the codec keeps one."""
        ...

    def residual(self) -> Sequence[torch.Tensor] | None:
        """What the last ``encode`` could not send, or None (lossless, or error feedback off)."""
        ...

    def coordinates(self, round: int, payload: torch.Tensor) -> list[torch.Tensor]:
        """Decode any cluster's payload of ``round`` into coordinates (fp32)."""
        ...

    def expand(self, round: int, coordinates: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Coordinates of ``round`` -> tensors shaped like the parameters (fp32)."""
        ...

    def project(self, round: int, dense: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Parameter-space tensors -> coordinates of ``round`` (orthogonal projection)."""
        ...

    def finish_round(
        self, round: int, mean: Sequence[torch.Tensor] | None, signals: RoundSignals
    ) -> None:
        """``round`` has been applied with these mean coordinates (None when every
        contribution was excluded): adapt what later rounds use."""
        ...

    def state_dict(self, prefix: str) -> dict[str, torch.Tensor]: ...

    def load_state_dict(self, state: Mapping[str, torch.Tensor], prefix: str) -> None: ...


class DenseCodec:
    """Plain DiLoCo: every pseudo-gradient element as little-endian fp32, no error feedback."""

    bits = 32

    def __init__(self, shapes: Sequence[torch.Size]) -> None:
        self.shapes = [torch.Size(s) for s in shapes]
        self.numels = [s.numel() for s in self.shapes]
        self.last_stats: dict[str, float] = {}
        self.encode_stats: dict[str, float] = {}

    def rank_of(self, round: int) -> int:
        return 0

    def payload_length(self, round: int) -> int:
        return 4 * sum(self.numels)

    def encode(self, round: int, pseudo_gradient: Sequence[torch.Tensor]) -> torch.Tensor:
        flat = torch.cat([g.detach().to(torch.float32).reshape(-1) for g in pseudo_gradient])
        return flat.view(torch.uint8)

    def residual(self) -> Sequence[torch.Tensor] | None:
        return None  # fp32 is what the algorithm computed: nothing dropped

    def coordinates(self, round: int, payload: torch.Tensor) -> list[torch.Tensor]:
        check_payload(payload, self.payload_length(round))
        values = float_view(payload, 32)  # a view of the payload where it is aligned
        return [
            v.view(shape)
            for v, shape in zip(torch.split(values, self.numels), self.shapes, strict=True)
        ]

    def expand(self, round: int, coordinates: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return list(coordinates)

    def project(self, round: int, dense: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return list(dense)

    def finish_round(
        self, round: int, mean: Sequence[torch.Tensor] | None, signals: RoundSignals
    ) -> None:
        return None  # nothing adapts

    def state_dict(self, prefix: str) -> dict[str, torch.Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, torch.Tensor], prefix: str) -> None:
        return None  # stateless


def check_payload(payload: torch.Tensor, expected_length: int) -> None:
    """Raise ``PayloadError`` unless ``payload`` is a 1-D uint8 tensor of the expected length."""
    if payload.dtype != torch.uint8 or payload.dim() != 1:
        raise PayloadError(
            f"expected a 1-D torch.uint8 payload, got dtype {payload.dtype} with shape "
            f"{tuple(payload.shape)}"
        )
    if payload.numel() != expected_length:
        raise PayloadError(f"expected a payload of {expected_length} bytes, got {payload.numel()}")
