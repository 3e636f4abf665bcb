"""Block absmax quantisation of low-rank factors to int8 / int4, and int4 packing.

A flat fp32 vector is cut into blocks of ``block`` elements (the last one zero-padded); each
block stores one bf16 scale ``s = absmax / L`` and integer codes ``round(x / s)`` in
``[−L, L]`` with ``L = 2^(bits−1) − 1`` (127 for int8, 7 for int4): symmetric, round to nearest,
so the error per element is at most ``s / 2``. This is the block-wise scheme of Dettmers et al.
("8-bit Optimizers via Block-wise Quantization", 2022) without the non-linear code book; the
bias of round-to-nearest is harmless because error feedback carries every residual into the
next round. The scale is bf16 (fp32's exponent range, half its bytes) and is rounded *up*
before the codes are computed with it, so no code ever leaves ``[−L, L]`` and the receiver
multiplies by exactly the scale the sender used.

Byte layout of one quantised vector: all codes, then all scales (little-endian bf16).
* int8: one two's-complement byte per code.
* int4: the code plus 8 (1..15) as an unsigned nibble, two per byte: element ``2k`` in the
  low nibble, element ``2k+1`` in the high nibble.
"""

from __future__ import annotations

import math

import torch

from trainer.outer.errors import PayloadError

SCALE_BYTES = 2  # bf16


def levels(bits: int) -> int:
    """Largest code magnitude ``L`` for a bit width (127 for 8 bits, 7 for 4 bits)."""
    if bits not in (4, 8):
        raise PayloadError(f"expected 4 or 8 quantisation bits, got {bits}")
    return int(2 ** (bits - 1) - 1)


def quantized_length(numel: int, *, bits: int, block: int) -> int:
    """Bytes of ``numel`` values quantised with ``bits`` in blocks of ``block``."""
    blocks = math.ceil(numel / block)
    code_bytes = blocks * block * bits // 8
    return code_bytes + blocks * SCALE_BYTES


def quantize(values: torch.Tensor, *, bits: int, block: int) -> torch.Tensor:
    """Quantise a float tensor (any shape, read flat) into the byte layout above."""
    L = levels(bits)
    flat = values.detach().to(torch.float32).reshape(-1)
    blocks = math.ceil(flat.numel() / block)
    padded = torch.zeros(blocks * block, dtype=torch.float32, device=flat.device)
    padded[: flat.numel()] = flat
    grid = padded.view(blocks, block)  # (blocks, block)
    absmax = grid.abs().amax(dim=1)
    scale = _round_up_bf16(absmax / L)
    safe = torch.where(scale > 0, scale.to(torch.float32), torch.ones_like(absmax))
    codes = torch.round(grid / safe[:, None]).clamp_(-L, L).to(torch.int8)  # (blocks, block)
    code_bytes = codes.view(torch.uint8).reshape(-1) if bits == 8 else pack_int4(codes.reshape(-1))
    return torch.cat([code_bytes, scale.view(torch.uint8)])


def dequantize(data: torch.Tensor, numel: int, *, bits: int, block: int) -> torch.Tensor:
    """Inverse of :func:`quantize`: ``numel`` fp32 values (flat) from the byte layout above."""
    expected = quantized_length(numel, bits=bits, block=block)
    if data.dtype != torch.uint8 or data.numel() != expected:
        raise PayloadError(f"expected {expected} quantised bytes, got {data.numel()} of {data.dtype}")
    blocks = math.ceil(numel / block)
    code_bytes = blocks * block * bits // 8
    raw, scale_bytes = data[:code_bytes], data[code_bytes:]
    codes = raw.view(torch.int8) if bits == 8 else unpack_int4(raw)
    scale = scale_bytes.contiguous().view(torch.bfloat16).to(torch.float32)
    values = codes.to(torch.float32).view(blocks, block) * scale[:, None]
    return values.reshape(-1)[:numel]


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """Signed codes in [−7, 7] (even count) -> bytes, two nibbles each (low nibble first)."""
    if codes.numel() % 2:
        raise PayloadError(f"expected an even number of int4 codes, got {codes.numel()}")
    nibbles = (codes.to(torch.int16) + 8).to(torch.uint8).view(-1, 2)
    return nibbles[:, 0] | (nibbles[:, 1] << 4)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Bytes -> signed int8 codes, inverse of :func:`pack_int4`."""
    low = (packed & 0x0F).to(torch.int8) - 8
    high = (packed >> 4).to(torch.int8) - 8
    return torch.stack([low, high], dim=1).reshape(-1)


def _round_up_bf16(x: torch.Tensor) -> torch.Tensor:
    """Smallest bf16 value >= x (x >= 0): truncate to bf16, bump one ulp if that lost anything."""
    down = x.to(torch.float32).view(torch.int32) & ~0xFFFF  # bf16 = the high 16 bits of fp32
    truncated = down.view(torch.float32)
    bumped = (down + 0x10000).view(torch.float32)
    up = torch.where(truncated < x, bumped, truncated)
    return up.to(torch.bfloat16)  # exact: the low 16 bits are zero
