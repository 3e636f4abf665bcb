"""Process settings that make a run repeatable bit for bit (on CPU, for a fixed topology).

* ``torch.use_deterministic_algorithms(True)``: kernels with a non-deterministic implementation
  raise instead of silently varying;
* one inter-op thread and ``TrainConfig.threads`` intra-op threads (default 1) per process on
  CPU: a reduction split over a thread-count-dependent number of chunks sums in a different
  order, so runs are bitwise repeatable for a fixed count, not across counts;
* ``CUBLAS_WORKSPACE_CONFIG`` on CUDA, required by cuBLAS for deterministic GEMMs;
* seeds: weights are seeded per parameter (trainer/model.py), the data order by the assignment
  rule, the outer algorithm by the run seed; the global torch generator is seeded too, per rank,
  and saved in every checkpoint, so anything that does draw from it resumes exactly.

Limits: bitwise equality holds for the same hardware, library versions and topology. Another
CPU (different SIMD paths), another torch, or another number of stages or micro-batches sums in
another order and agrees only within floating-point tolerance; GPUs add kernel choices on top.
"""

from __future__ import annotations

import os

import torch

from trainer.errors import ConfigError

CUBLAS_DETERMINISTIC_WORKSPACE = ":4096:8"
"""``CUBLAS_WORKSPACE_CONFIG`` for deterministic cuBLAS GEMMs (CUDA docs, "Reproducibility")."""


def uses_cuda(requested: str) -> bool:
    """Whether processes asked for ``requested`` (``TrainConfig.device``) train on CUDA."""
    return requested == "cuda" or (requested == "auto" and torch.cuda.is_available())


def check_devices(requested: str, per_cluster: int, *, visible: int | None = None) -> None:
    """Before any process starts: a cluster's S·D processes each need a GPU of their own (NCCL
    refuses two ranks of one world on one device), while clusters are separate worlds and may
    share the host's GPUs. ``visible``: the CUDA devices this process sees (default: count)."""
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return
    count = torch.cuda.device_count() if visible is None else visible
    if count == 0:
        raise ConfigError(
            "TrainConfig.device is 'cuda' but no CUDA device is visible: "
            "train with --device cpu, or on a host with a GPU"
        )
    if per_cluster > count:
        raise ConfigError(
            f"each cluster runs stages x data_parallel = {per_cluster} processes, one per GPU, "
            f"but {count} CUDA device(s) are visible: use stages x data_parallel <= {count} "
            f"(e.g. --stages {count}), or --device cpu"
        )


def pick_device(requested: str, local_rank: int) -> torch.device:
    """The device of a process: ``cuda:<local rank>`` when CUDA is requested or available. The
    local rank is the process's rank in its cluster's world (several clusters on one host share
    its GPUs); ``check_devices`` has made sure there is one GPU per rank."""
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("TrainConfig.device is 'cuda' but no CUDA device is available")
    if uses_cuda(requested):
        if local_rank >= torch.cuda.device_count():
            raise ConfigError(
                f"expected a GPU for local rank {local_rank}, got "
                f"{torch.cuda.device_count()} visible CUDA device(s)"
            )
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def make_deterministic(seed: int, rank: int, device: torch.device, *, threads: int = 1) -> None:
    """Apply the settings of the module docstring to this process."""
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC_WORKSPACE)
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = False
    else:
        torch.set_num_threads(threads)
        if torch.get_num_interop_threads() != 1:
            try:
                torch.set_num_interop_threads(1)
            except RuntimeError as exc:  # only settable before any inter-op work in this process
                raise ConfigError(
                    "expected to set 1 inter-op thread before "
                    "any parallel work; start training in a "
                    f"fresh process (torch says: {exc})"
                ) from exc
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed * 1_000_003 + rank)
