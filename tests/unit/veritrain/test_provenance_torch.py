"""The genesis's dependency identity names what ran: a GPU host keeps its own CUDA torch
(pyproject asks only torch>=2.7), and a second copy's metadata further on ``sys.path`` (or a
stale one ahead of it) must not be recorded in its place."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from veritrain.record.provenance import dependency_identity


def test_the_dependency_identity_names_the_torch_that_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = dependency_identity()
    assert before.torch == torch.__version__
    stale = tmp_path / "torch-2.7.0.dist-info"  # metadata of a torch that is not imported
    stale.mkdir()
    (stale / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.7.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    after = dependency_identity()
    assert after.torch == torch.__version__
    assert (after.sha256, after.distributions) == (before.sha256, before.distributions)
