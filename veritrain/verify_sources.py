"""Choosing a verifier's source: the settings' database and store, or an API URL."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from veritrain.settings import load_settings
from veritrain.verify.source import DirectSource, RunSource


@contextlib.contextmanager
def open_source(api: str | None) -> Iterator[RunSource]:
    if api is not None:
        from veritrain.verify.api_source import ApiSource

        source: RunSource = ApiSource(api)
    else:
        source = DirectSource(load_settings())
    try:
        yield source
    finally:
        source.close()
