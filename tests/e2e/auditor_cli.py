"""The ``veritrain`` command as an auditor runs it, with no ``VERITRAIN_*`` database or store in
its environment, so a served URL (``--api``) is all it has.

:func:`run_as_auditor` runs the installed console script in a subprocess: for the tests whose
point is that separate process. :func:`run_as_auditor_in_process` runs the same entry point
with the same environment inside the test process (unit/veritrain_in_process.py): for tests of
what the command prints and returns, without paying torch's import again."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from unit.veritrain_in_process import run_veritrain


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


def run_as_auditor_in_process(args: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    """:func:`run_as_auditor`, in the test's own process."""
    return run_veritrain(args, cwd=folder, env={"VERITRAIN_WITNESS_DIR": str(folder / "witness")})
