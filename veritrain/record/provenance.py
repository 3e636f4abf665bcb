"""What code and which dependencies produced a run: the digests recorded in its genesis.

The code digest is a SHA-256 over veritrain's own source tree (every ``.py`` file of the
packages of DESIGN.md §1 plus the Alembic versions, in sorted path order), so it is the same
for a git checkout and an installed copy of the same source. The git commit is recorded too
when the source is a checkout, with a ``dirty`` flag when it has uncommitted changes.

The dependency digest is a SHA-256 over the sorted ``name==version`` lines of every installed
distribution (the first of each name on ``sys.path``, the one an import finds): two
environments with the same digest ran the same package versions. The torch version is the
imported module's own (``2.13.0+cpu`` from ``make``, ``2.11.0+cu130`` on a CUDA host that kept
its torch).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import platform
import subprocess
import sys
from pathlib import Path

from records.genesis import CodeIdentity, DependencyIdentity

PACKAGES = (
    "attestation",
    "records",
    "storage",
    "ledger",
    "trainer",
    "web",
    "veritrain",
    "migrations",
)
SOURCE_ROOT = Path(__file__).resolve().parents[2]  # veritrain/record/ -> the source root


def source_files(root: Path = SOURCE_ROOT) -> list[Path]:
    files: list[Path] = []
    for package in PACKAGES:
        files.extend(p for p in (root / package).rglob("*.py") if "__pycache__" not in p.parts)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def code_identity(root: Path = SOURCE_ROOT) -> CodeIdentity:
    files = source_files(root)
    tree = hashlib.sha256()
    for path in files:
        # One line per file: "<sha256>  <relative path>\n" (the sha256sum format), so an
        # auditor can recompute the digest with coreutils alone.
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        tree.update(f"{digest}  {path.relative_to(root).as_posix()}\n".encode())
    commit, dirty = _git_state(root)
    return CodeIdentity(
        source_sha256=tree.hexdigest(), git_commit=commit, git_dirty=dirty, files=len(files)
    )


def dependency_identity() -> DependencyIdentity:
    # The first distribution of each name on sys.path is the one an import finds: a GPU host's
    # own torch (or a PYTHONPATH copy of a package) shadows another of the same name further
    # on, and only what runs is recorded.
    torch_module = sys.modules.get("torch")
    found: dict[str, str] = {}
    if torch_module is not None:  # the torch that runs, whatever metadata says
        found["torch"] = str(torch_module.__version__)
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name and name != "veritrain":
            found.setdefault(name, dist.version)
    lines = sorted(f"{name}=={version}" for name, version in found.items())
    digest = hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest()
    return DependencyIdentity(
        sha256=digest,
        python=f"{platform.python_implementation()} {sys.version.split()[0]}",
        torch=found.get("torch", "absent"),
        distributions=len(lines),
    )


def _git_state(root: Path) -> tuple[str | None, bool]:
    if not (root / ".git").exists():
        return None, False
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                *PACKAGES,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None, False
    return commit, bool(status.strip())
