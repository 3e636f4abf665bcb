"""Expensive test inputs (a recorded run: several processes and minutes of CPU) built once per
``pytest`` session, also when pytest-xdist runs the tests in several worker processes.

A session-scoped fixture is per *process*: under ``pytest -n 4`` every worker that runs a test
needing it would build it again. :func:`built_once` builds it in the folder that all workers of
one session share (xdist gives each worker ``<session basetemp>/popen-gwN``), under a file lock:
the first worker to ask builds it, the others wait and then read the same result. Tests only
read what is built this way; a test that alters a run works on its own copy (``fresh_run``).
"""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from filelock import FileLock

T = TypeVar("T")


def session_folder(factory: pytest.TempPathFactory) -> Path:
    """The temporary folder of this whole session: the parent of a worker's own basetemp under
    xdist, the basetemp itself in a plain run."""
    basetemp = factory.getbasetemp()
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]) -> T:
    """``build(folder)`` run once per session for ``name``; every caller gets its result.

    The result is pickled next to the folder, so workers that did not build it get an equal
    value. A build that failed (no pickle) is retried by the next caller, from an empty folder.
    """
    root = session_folder(factory)
    folder = root / f"built-{name}"
    result = root / f"built-{name}.pickle"
    with FileLock(str(root / f"built-{name}.lock")):
        if result.is_file():
            value: T = pickle.loads(result.read_bytes())
            return value
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir()
        value = build(folder)
        result.write_bytes(pickle.dumps(value))
        return value
