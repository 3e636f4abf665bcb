"""A device's peak FLOP/s, the denominator of MFU (``veritrain bench throughput``).

For a GPU the peak is its datasheet's dense rate for the step's arithmetic: dense, because the
trainer's matrices are dense (the datasheets' headline bf16 numbers assume 2:4 structured
sparsity and are twice these). Sources, NVIDIA's product datasheets:

* H100 (nvidia.com/en-us/data-center/h100, "H100 Tensor Core GPU datasheet"): BF16 Tensor Core
  1,979 TFLOPS SXM, 1,671 NVL, 1,513 PCIe "with sparsity"; FP32 67 / 60 / 51 TFLOPS;
* H200 (nvidia.com/en-us/data-center/h200): BF16 1,979 SXM, 1,671 NVL with sparsity; FP32 67 / 60;
* A100 (nvidia.com/en-us/data-center/a100, "A100 datasheet"): BF16 312 TFLOPS dense (624 with
  sparsity), FP32 19.5, SXM and PCIe alike;
* L40S: BF16 733 with sparsity (362 dense), FP32 91.6; L4: BF16 242 with sparsity (121 dense),
  FP32 30.3.

The trainer's fp32 products do not use TF32 (PyTorch's default), so an fp32 step's peak is the
FP32 column. A GPU not in the table is measured instead: a bf16 (or fp32) product of two
8192-square matrices, timed after a warm-up (smaller products do not fill an H100: 1024² ran at
47 TFLOP/s on an H200 whose 8192² products run at about 790). On a CPU there is no datasheet to
read, and the rate measured is that of a 1024-square product (an 8192² product takes minutes on
a few cores): an achievable peak of this machine, stated as such in the result.

Whatever the source, MFU never exceeds 1: a measured peak below what the step itself achieved is
no peak, and the step's own rate replaces it (and says so); a given ``--peak-tflops`` below the
step's rate is refused.
"""

from __future__ import annotations

import time

import torch

from trainer.config import Precision

DATASHEET_TFLOPS: tuple[tuple[str, float, float], ...] = (
    # (name contains, dense bf16, fp32), first match wins: the specific names first.
    ("H200 NVL", 835.5, 60.0),
    ("H200", 989.5, 67.0),
    ("H100 NVL", 835.5, 60.0),
    ("H100 PCIe", 756.5, 51.0),
    ("H100", 989.5, 67.0),
    ("A100", 312.0, 19.5),
    ("L40S", 366.5, 91.6),
    ("L4", 121.0, 30.3),
)
"""Dense TFLOP/s of the datasheets in the module docstring, by ``torch.cuda.get_device_name``."""

MEASURED_SIZE = {"cuda": 8192, "cpu": 1024}
"""Side of the square matrices a measured peak multiplies, by device type."""


def datasheet_tflops(device_name: str, precision: Precision) -> float | None:
    """The datasheet's dense peak for ``device_name`` at ``precision`` (None: not listed)."""
    if precision == "fp64":
        return None
    for name, bf16, fp32 in DATASHEET_TFLOPS:
        if name in device_name:
            return bf16 if precision == "bf16" else fp32
    return None


def device_peak(device: torch.device, precision: Precision) -> tuple[float, str]:
    """(peak TFLOP/s, where it comes from) for a step at ``precision`` on ``device``."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        listed = datasheet_tflops(name, precision)
        if listed is not None:
            return listed, f"datasheet dense {precision} of {name}"
    size = MEASURED_SIZE.get(device.type, 1024)
    # The faster of fp32 and the step's arithmetic: on a CPU without bf16 units a bf16 product
    # is slower than fp32, and the peak must bound what the step achieves.
    rates = {p: matmul_tflops(device, p, size=size) for p in {"fp32", precision}}
    best = max(rates, key=lambda p: rates[p])
    return rates[best], f"measured {best} {size}² matmul rate"


def bounded_peak(peak: float, source: str, achieved: float) -> tuple[float, str]:
    """``peak`` unless the step achieved more (then it was no peak: the step's own rate)."""
    if achieved > peak:
        return achieved, f"the step's own rate ({source}: {peak:.3g} TFLOP/s, below it)"
    return peak, source


def matmul_tflops(
    device: torch.device, precision: Precision, *, size: int = 1024, repeats: int = 5
) -> float:
    """TFLOP/s of ``size``-square matrix products in the step's arithmetic (2 n³ FLOPs each)."""
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp64": torch.float64}[precision]
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    for _ in range(3 if device.type == "cuda" else 1):  # warm-up (clocks, cuBLAS heuristics)
        torch.mm(a, b)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(repeats):
        torch.mm(a, b)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = (time.perf_counter() - started) / repeats
    return 2 * size**3 / seconds / 1e12
