"""tests/built_once.py: an input the tests share is built once per session, also when xdist runs
the tests in several worker processes (as ``make test`` does), and every worker reads the same
result."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = """
import os
from pathlib import Path

import pytest
from built_once import built_once

LOG = Path(os.environ["BUILT_ONCE_LOG"])


def build(folder: Path) -> str:
    with (LOG / "builds").open("a") as out:
        out.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
    (folder / "run.txt").write_text("recorded")
    return str(folder / "run.txt")


@pytest.fixture(scope="session")
def shared(tmp_path_factory: pytest.TempPathFactory) -> str:
    return built_once(tmp_path_factory, "run", build)
"""

TESTS_MODULE = """
import os
from pathlib import Path

import pytest

LOG = Path(os.environ["BUILT_ONCE_LOG"])


@pytest.mark.parametrize("n", range(8))
def test_reads_the_shared_run(shared: str, n: int) -> None:
    assert Path(shared).read_text() == "recorded"
    with (LOG / "tests").open("a") as out:
        out.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
"""


def _run_session(tmp_path: Path, *options: str) -> tuple[list[str], list[str]]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (project / "test_shared.py").write_text(textwrap.dedent(TESTS_MODULE))
    log = tmp_path / "log"
    log.mkdir()
    env = {
        # Not the variables of the xdist worker that runs this test: the inner session has its own.
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
        "BUILT_ONCE_LOG": str(log),
        # Only the plugins the inner session uses (xdist, asked for by name): loading every
        # installed one costs each of its processes ~3 s of CPU (schemathesis alone ~1 s).
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "8 passed" in completed.stdout
    return (log / "builds").read_text().split(), (log / "tests").read_text().split()


def test_two_workers_build_a_shared_run_once_and_both_read_it(tmp_path: Path) -> None:
    builds, tests = _run_session(
        tmp_path, "-p", "xdist", "-n", "2", "--dist", "load", f"--basetemp={tmp_path / 'base'}"
    )

    assert len(builds) == 1
    assert sorted(set(tests)) == ["gw0", "gw1"]  # both workers ran tests on the one build


def test_without_xdist_the_run_is_built_once_too(tmp_path: Path) -> None:
    builds, tests = _run_session(tmp_path, f"--basetemp={tmp_path / 'base'}")

    assert builds == ["main"]
    assert tests == ["main"] * 8
