"""The ``veritrain`` console entry point (``veritrain.cli.main:main``) run inside the test's own
process, as a user's shell would run it: its own argv, working folder, ``VERITRAIN_*``
environment and standard streams, and its exit status.

A subprocess of the console script costs its imports again (torch alone is ~3 s of CPU for
``verify`` or ``reproduce``); the test process has them already. Use this where a test checks
what a command prints and returns; keep a subprocess where the separate process is the point
(tests/e2e/auditor_cli.py: an auditor with no database in its environment; tests/e2e/
test_demo_cli.py: the installed script from a fresh directory).

An exception that ``main`` does not turn into one line and an exit status propagates to the
test and fails it, as a traceback on the subprocess's stderr would.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from veritrain.cli.main import main


def run_veritrain(
    args: list[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``veritrain ARGS`` in ``cwd``, with no ``VERITRAIN_*`` variable but those in ``env``
    (other variables as the test process has them); its output captured as text."""
    stdout, stderr = io.StringIO(), io.StringIO()
    code: int
    with (
        pytest.MonkeyPatch.context() as patch,
        contextlib.chdir(cwd),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        for name in [n for n in os.environ if n.startswith("VERITRAIN_")]:
            patch.delenv(name)
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        patch.setattr(sys, "argv", ["veritrain", *args])
        patch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO((stdin or "").encode())))
        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    return subprocess.CompletedProcess(
        ["veritrain", *args], code, stdout.getvalue(), stderr.getvalue()
    )
