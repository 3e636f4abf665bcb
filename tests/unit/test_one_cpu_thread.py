"""A test process computes on one CPU thread, and so does every process it starts
(tests/conftest.py sets ``OMP_NUM_THREADS``): parallel test workers on a small machine otherwise
spend their CPU time waiting on each other's threads."""

from __future__ import annotations

import os
import subprocess
import sys

import torch


def test_a_test_and_the_processes_it_starts_compute_on_the_threads_set_for_the_tests() -> None:
    threads = os.environ.get("OMP_NUM_THREADS")
    assert threads is not None, "tests/conftest.py sets OMP_NUM_THREADS before torch is imported"
    assert torch.get_num_threads() == int(threads)  # 1 unless set by hand
    child = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert int(child.stdout) == int(threads)
