"""Block quantisation of low-rank factors to int8 / int4 / int2, and sub-byte packing.

A flat fp32 vector is cut into blocks of ``block`` elements (the last one zero-padded); each
block stores one bf16 scale ``s`` and one integer code per element.

* int8, int4 -- absmax, symmetric: ``s = absmax / L`` and codes ``round(x / s)`` in ``[−L, L]``
  with ``L = 2^(bits−1) − 1`` (127, 7), so the error per element is at most ``s / 2``. This is
  the block-wise scheme of Dettmers et al. ("8-bit Optimizers via Block-wise Quantization",
  2022) without the non-linear code book. The scale is rounded *up* to bf16 before the codes
  are computed with it, so no code ever leaves ``[−L, L]``.
* int2 -- four levels, midrise: values ``(k + ½)·s`` for codes ``k`` in ``{−2, −1, 0, 1}``
  with ``s`` the block's root mean square, inputs beyond ``±2s`` clipped to the outer levels.
  Absmax scaling wastes two bits: a ternary ``{−s, 0, s}`` grid set by the block's largest
  element rounds most of a roughly Gaussian block to zero (mean squared error ~0.45 σ²). A
  uniform four-level grid with a step of about one standard deviation is the minimum-error
  uniform quantiser of a Gaussian (Max, "Quantizing for Minimum Distortion", IRE Trans. IT
  1960, Table II: step 0.996 σ, error 0.119 σ²).

Round to nearest is biased and int2 clips, both harmless here: error feedback carries every
residual into the next round. int2's RMS is a vectorised sum of squares, whose order (and so,
rarely, the bf16 scale) follows the CPU's vector instruction set: bitwise within a hardware
class, as everything re-executed is (docs/outer-algorithm.md §6). Scales are bf16 (fp32's
exponent range, half its bytes); the receiver multiplies by exactly the scale the sender used.

Byte layout of one quantised vector: all codes, then all scales (little-endian bf16).
* int8: one two's-complement byte per code.
* int4: the code plus 8 (1..15) as an unsigned nibble, two per byte: element ``2k`` in the
  low nibble, element ``2k+1`` in the high nibble.
* int2: the code plus 2 (0..3) in two bits, four per byte: element ``4k+j`` in bits
  ``2j..2j+1``.
* When the codes of all blocks do not fill whole bytes (int2 with an odd number of blocks of
  a size that is 2 mod 4), the last byte is completed with zero bits, which no decoder reads.
"""

from __future__ import annotations

import math

import torch

from trainer.outer.errors import PayloadError

SCALE_BYTES = 2  # bf16
QUANTIZED_BITS = (2, 4, 8)
"""The bit widths this module quantises to (16 and 32 are plain bf16 / fp32 elsewhere)."""


def levels(bits: int) -> int:
    """Largest code magnitude ``L`` of the absmax widths (127 for 8 bits, 7 for 4); for 2 bits,
    1: the largest code (the levels there are the half-integers up to 1.5)."""
    if bits not in QUANTIZED_BITS:
        raise PayloadError(f"expected 2, 4 or 8 quantisation bits, got {bits}")
    return int(2 ** (bits - 1) - 1)


def quantized_length(numel: int, *, bits: int, block: int) -> int:
    """Bytes of ``numel`` values quantised with ``bits`` in blocks of ``block``."""
    blocks = math.ceil(numel / block)
    return _code_bytes(blocks * block, bits) + blocks * SCALE_BYTES


def _code_bytes(codes: int, bits: int) -> int:
    """Whole bytes that hold ``codes`` codes of ``bits`` bits (the last one completed)."""
    return math.ceil(codes * bits / 8)


def encoded_length(numel: int, *, bits: int, block: int) -> int:
    """Bytes of ``numel`` values sent at ``bits``: block-quantised (2, 4, 8) as above, or
    plain bf16 / fp32 (16, 32) -- what the codec and the planner both count."""
    if bits in QUANTIZED_BITS:
        return quantized_length(numel, bits=bits, block=block)
    return numel * _float_dtype(bits).itemsize


def encode(values: torch.Tensor, *, bits: int, block: int) -> torch.Tensor:
    """``values`` (read flat) as ``bits``-wide bytes: :func:`quantize`, or a bf16 / fp32 copy."""
    if bits in QUANTIZED_BITS:
        return quantize(values, bits=bits, block=block)
    return values.detach().reshape(-1).to(_float_dtype(bits)).view(torch.uint8)


def decode(data: torch.Tensor, numel: int, *, bits: int, block: int) -> torch.Tensor:
    """Inverse of :func:`encode`: ``numel`` fp32 values (flat)."""
    if bits in QUANTIZED_BITS:
        return dequantize(data.contiguous(), numel, bits=bits, block=block)
    itemsize = _float_dtype(bits).itemsize
    if data.dtype != torch.uint8 or data.numel() != numel * itemsize:
        raise PayloadError(
            f"expected {numel * itemsize} bytes of {numel} {bits}-bit floats, "
            f"got {data.numel()} of {data.dtype}"
        )
    return float_view(data, bits).to(torch.float32, copy=True)  # never aliases the payload


def float_view(data: torch.Tensor, bits: int) -> torch.Tensor:
    """Bytes (1-D uint8, a whole number of elements) read as bf16 (16) or fp32 (32) values: a
    view of ``data`` where its bytes already sit at an offset of whole elements, else a view of
    a copy. A segment sliced out of a payload starts wherever the segments before it ended (an
    int8 tensor of an odd number of blocks ends 2 bytes past a multiple of 4), and
    ``Tensor.view`` to a wider dtype refuses an offset it cannot align."""
    dtype = _float_dtype(bits)
    if data.numel() % dtype.itemsize:
        raise PayloadError(f"{data.numel()} bytes are not a whole number of {bits}-bit floats")
    if not data.is_contiguous() or data.storage_offset() % dtype.itemsize:
        data = data.clone(memory_format=torch.contiguous_format)
    return data.view(dtype)


def _float_dtype(bits: int) -> torch.dtype:
    if bits not in (16, 32):
        raise PayloadError(f"expected 2, 4, 8, 16 or 32 bits per element, got {bits}")
    return torch.bfloat16 if bits == 16 else torch.float32


def quantize(values: torch.Tensor, *, bits: int, block: int) -> torch.Tensor:
    """Quantise a float tensor (any shape, read flat) into the byte layout above."""
    L = levels(bits)
    flat = values.detach().to(torch.float32).reshape(-1)
    blocks = math.ceil(flat.numel() / block)
    padded = torch.zeros(blocks * block, dtype=torch.float32, device=flat.device)
    padded[: flat.numel()] = flat
    grid = padded.view(blocks, block)  # (blocks, block)
    if bits == 2:
        counts = torch.full((blocks,), float(block), device=flat.device)
        counts[-1] = flat.numel() - (blocks - 1) * block  # the padding is not data
        scale = (grid.pow(2).sum(dim=1) / counts).sqrt().to(torch.bfloat16)
        safe = torch.where(scale > 0, scale.to(torch.float32), torch.ones_like(counts))
        codes = torch.floor(grid / safe[:, None]).clamp_(-2, 1).to(torch.int8)
    else:
        absmax = grid.abs().amax(dim=1)
        scale = _round_up_bf16(absmax / L)
        safe = torch.where(scale > 0, scale.to(torch.float32), torch.ones_like(absmax))
        codes = torch.round(grid / safe[:, None]).clamp_(-L, L).to(torch.int8)  # (blocks, block)
    if bits == 8:
        code_bytes = codes.view(torch.uint8).reshape(-1)
    else:
        flat_codes = codes.reshape(-1)
        spare = -flat_codes.numel() % _per_byte(bits)  # completes the last byte with zero bits
        filler = torch.full((spare,), -(2 ** (bits - 1)), dtype=torch.int8, device=flat.device)
        code_bytes = pack_codes(torch.cat([flat_codes, filler]), bits)
    return torch.cat([code_bytes, scale.view(torch.uint8)])


def dequantize(data: torch.Tensor, numel: int, *, bits: int, block: int) -> torch.Tensor:
    """Inverse of :func:`quantize`: ``numel`` fp32 values (flat) from the byte layout above."""
    expected = quantized_length(numel, bits=bits, block=block)
    if data.dtype != torch.uint8 or data.numel() != expected:
        raise PayloadError(
            f"expected {expected} quantised bytes, got {data.numel()} of {data.dtype}"
        )
    blocks = math.ceil(numel / block)
    code_bytes = _code_bytes(blocks * block, bits)
    raw, scale_bytes = data[:code_bytes], data[code_bytes:]
    codes = raw.view(torch.int8) if bits == 8 else unpack_codes(raw, bits)[: blocks * block]
    scale = float_view(scale_bytes, 16).to(torch.float32)
    steps = codes.to(torch.float32) + (0.5 if bits == 2 else 0.0)  # int2 levels are midrise
    values = steps.view(blocks, block) * scale[:, None]
    return values.reshape(-1)[:numel]


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Signed codes (``[−7, 7]`` for 4 bits, ``[−2, 1]`` for 2) -> bytes, ``8 / bits`` codes
    each, the first in the lowest bits; the count must fill whole bytes."""
    per_byte = _per_byte(bits)
    if codes.numel() % per_byte:
        raise PayloadError(
            f"expected a multiple of {per_byte} int{bits} codes, got {codes.numel()}"
        )
    fields = (codes.to(torch.int16) + 2 ** (bits - 1)).to(torch.uint8).view(-1, per_byte)
    packed = torch.zeros(fields.shape[0], dtype=torch.uint8, device=codes.device)
    for j in range(per_byte):
        packed |= fields[:, j] << (bits * j)
    return packed


def unpack_codes(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """Bytes -> signed int8 codes, inverse of :func:`pack_codes`."""
    per_byte = _per_byte(bits)
    mask, offset = 2**bits - 1, 2 ** (bits - 1)
    fields = [((packed >> (bits * j)) & mask).to(torch.int8) - offset for j in range(per_byte)]
    return torch.stack(fields, dim=1).reshape(-1)


def _per_byte(bits: int) -> int:
    if bits not in (2, 4):
        raise PayloadError(f"expected 2 or 4 bits per packed code, got {bits}")
    return 8 // bits


def _round_up_bf16(x: torch.Tensor) -> torch.Tensor:
    """Smallest bf16 value >= x (x >= 0): truncate to bf16, bump one ulp if that lost anything."""
    down = x.to(torch.float32).view(torch.int32) & ~0xFFFF  # bf16 = the high 16 bits of fp32
    truncated = down.view(torch.float32)
    bumped = (down + 0x10000).view(torch.float32)
    up = torch.where(truncated < x, bumped, truncated)
    return up.to(torch.bfloat16)  # exact: the low 16 bits are zero
