"""scripts/gpu-check.sh, the prepared GPU check (issue 22), and scripts/gpu-convergence.sh, the
GPU convergence study (issue 24), on a machine without CUDA: one clear line and a non-zero exit,
before they write or run anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def _without_cuda(script: str, out: Path) -> subprocess.CompletedProcess[str]:
    assert not torch.cuda.is_available()  # CI has no GPU: this is the case it is for
    return subprocess.run(
        [str(ROOT / "scripts" / script), str(out)],
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_cuda_the_gpu_check_stops_with_one_clear_line(tmp_path: Path) -> None:
    done = _without_cuda("gpu-check.sh", tmp_path / "out")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        f"gpu-check: no CUDA device visible to {sys.executable} (torch {torch.__version__}): "
        "run this on a GPU host\n"
    )
    assert not (tmp_path / "out").exists()  # nothing written, nothing run


def test_without_cuda_the_gpu_convergence_study_stops_with_one_clear_line(tmp_path: Path) -> None:
    done = _without_cuda("gpu-convergence.sh", tmp_path / "out")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"gpu-convergence: no CUDA device visible to {sys.executable}\n"
    assert not (tmp_path / "out").exists()


def test_a_missing_interpreter_is_named(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(ROOT / "scripts" / "gpu-check.sh"), str(tmp_path / "out")],
        env={"PATH": "/usr/bin:/bin", "PYTHON": "/nonexistent/python3"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (
        2,
        "gpu-check: no Python interpreter '/nonexistent/python3' (set PYTHON=/path/to/python3)\n",
    )
