"""Scratch folders for benchmark files: the caller's, or a temporary one removed afterwards --
unless the benchmark failed: then it is kept, since its error names the logs inside it."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def scratch_dir(given: Path | None, *, prefix: str) -> Iterator[Path]:
    """``given`` (created if needed, kept afterwards), else a new temporary folder that is
    removed with everything in it when the block succeeds (stored objects are read-only files;
    removal still works) and kept when it raises."""
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    yield folder  # an exception skips the removal: the error's logs stay readable
    shutil.rmtree(folder, ignore_errors=True)
