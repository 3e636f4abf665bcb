"""Block absmax quantisation and int4 packing."""

from __future__ import annotations

import pytest
import torch

from trainer.outer.errors import PayloadError
from trainer.outer.quantize import (
    dequantize,
    levels,
    pack_int4,
    quantize,
    quantized_length,
    unpack_int4,
)


def test_int4_packing_round_trips_every_code():
    codes = torch.arange(-7, 8, dtype=torch.int8).repeat(3)[:-1]  # 44 codes, every value
    packed = pack_int4(codes)
    assert packed.dtype == torch.uint8 and packed.numel() == codes.numel() // 2
    assert torch.equal(unpack_int4(packed), codes)
    # Documented layout: element 2k in the low nibble, 2k+1 in the high nibble, code + 8.
    assert pack_int4(torch.tensor([-7, 7], dtype=torch.int8)).tolist() == [0x01 | (0x0F << 4)]


def test_int4_packing_refuses_an_odd_count():
    with pytest.raises(PayloadError, match="even number"):
        pack_int4(torch.zeros(3, dtype=torch.int8))


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("block", [32, 64])
def test_error_is_within_half_a_step_of_each_blocks_absmax(bits, block):
    g = torch.Generator().manual_seed(bits * block)
    # Blocks of very different magnitude: each must get its own scale.
    values = torch.randn(1000, generator=g) * torch.logspace(-6, 1, 1000)
    data = quantize(values, bits=bits, block=block)
    assert data.numel() == quantized_length(1000, bits=bits, block=block)
    decoded = dequantize(data, 1000, bits=bits, block=block)

    padded = torch.nn.functional.pad(values, (0, -1000 % block))
    absmax = padded.view(-1, block).abs().amax(dim=1).repeat_interleave(block)[:1000]
    bound = absmax / levels(bits) / 2 * (1 + 2**-7)  # the bf16 scale is rounded up
    assert bool(((values - decoded).abs() <= bound).all())
    assert (values - decoded).abs().max() > 0  # it is lossy, so the bound is what is tested


def test_all_zero_blocks_decode_to_zero():
    assert torch.equal(dequantize(quantize(torch.zeros(10), bits=4, block=8), 10, bits=4, block=8), torch.zeros(10))


def test_wrong_length_is_refused():
    data = quantize(torch.ones(100), bits=8, block=64)
    with pytest.raises(PayloadError, match="expected 132 quantised bytes, got 131"):
        dequantize(data[:-1], 100, bits=8, block=64)
