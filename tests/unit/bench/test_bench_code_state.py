"""What ``bench comm`` says it measured: the changed files are named by their whole paths."""

from __future__ import annotations

import subprocess
from pathlib import Path

from veritrain.bench.comm import porcelain_paths


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_unstaged_and_staged_changes_are_named_by_their_whole_paths(tmp_path: Path) -> None:
    (tmp_path / "trainer" / "outer").mkdir(parents=True)
    presets, codec = tmp_path / "trainer" / "presets.py", tmp_path / "trainer" / "outer" / "c.py"
    presets.write_text("A = 1\n")
    codec.write_text("B = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "start")
    codec.write_text("B = 2\n")  # " M trainer/outer/c.py", the first line: it starts with a space
    presets.write_text("A = 2\n")
    _git(tmp_path, "add", "trainer/presets.py")  # "M  trainer/presets.py"

    status = _git(tmp_path, "status", "--porcelain")
    assert status.startswith(" M trainer/outer/c.py\n")

    assert sorted(porcelain_paths(status)) == ["trainer/outer/c.py", "trainer/presets.py"]
    assert porcelain_paths("") == []
