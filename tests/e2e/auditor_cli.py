"""The ``veritrain`` command as an auditor runs it: the installed console script in a
subprocess, with no ``VERITRAIN_*`` database or store in its environment, so a served URL
(``--api``) is all it has."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def run_as_auditor(args: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    """``veritrain ARGS`` run in ``folder``, remembering the heads it has seen in
    ``folder/witness``; its output is captured as text."""
    veritrain = shutil.which("veritrain", path=str(Path(sys.executable).parent))
    assert veritrain is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERITRAIN_")}
    env["VERITRAIN_WITNESS_DIR"] = str(folder / "witness")
    return subprocess.run(
        [veritrain, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=600
    )
