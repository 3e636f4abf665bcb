"""Where ``verify``, ``reproduce`` and ``train --resume`` read a recorded run from: the
settings' database and store (:class:`DirectSource`) or a server's public API
(:class:`ApiSource`). Nothing a source returns is trusted."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from veritrain.errors import CorruptObjectError, SourceError
from veritrain.sources.base import (
    SMALL_OBJECT_LIMIT,
    MetricRow,
    RunSource,
    read_verified,
    stream_verified,
)
from veritrain.sources.direct import DirectSource

__all__ = [
    "SMALL_OBJECT_LIMIT",
    "CorruptObjectError",
    "DirectSource",
    "MetricRow",
    "RunSource",
    "SourceError",
    "open_source",
    "read_verified",
    "stream_verified",
]


@contextlib.contextmanager
def open_source(api: str | None) -> Iterator[RunSource]:
    """The public API at ``api``, or (None) the database and store of the settings."""
    from veritrain.settings import load_settings

    if api is not None:
        from veritrain.sources.api import ApiSource

        source: RunSource = ApiSource(api)
    else:
        source = DirectSource(load_settings())
    try:
        yield source
    finally:
        source.close()
