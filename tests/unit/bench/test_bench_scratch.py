"""A benchmark's temporary folder goes away after a success and stays after a failure (its
error names the logs inside it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from veritrain.bench.scratch import scratch_dir


def test_a_temporary_folder_is_removed_after_success() -> None:
    with scratch_dir(None, prefix="veritrain-test-scratch-") as folder:
        (folder / "log").write_text("fine")
    assert not folder.exists()


def test_a_temporary_folder_is_kept_when_the_benchmark_fails() -> None:
    kept: Path | None = None
    with pytest.raises(RuntimeError), scratch_dir(None, prefix="veritrain-test-scratch-") as folder:
        kept = folder
        (folder / "log").write_text("what went wrong")
        raise RuntimeError("the link run did not finish")
    assert kept is not None and (kept / "log").read_text() == "what went wrong"
    (kept / "log").unlink()
    kept.rmdir()


def test_a_given_folder_is_kept(tmp_path: Path) -> None:
    with scratch_dir(tmp_path / "work", prefix="unused") as folder:
        (folder / "log").write_text("kept")
    assert (tmp_path / "work" / "log").read_text() == "kept"
