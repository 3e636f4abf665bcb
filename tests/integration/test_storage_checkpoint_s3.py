"""A small transformer's checkpoint uploaded to the real SeaweedFS and downloaded back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from unit.storage.checkpoint_round_trip import assert_checkpoint_round_trip

from storage import ObjectStore, open_store


@pytest.fixture
def store(s3_store_url: str) -> Iterator[ObjectStore]:
    with open_store(s3_store_url) as s3:
        yield s3


def test_a_checkpoint_round_trips_bit_exactly_through_s3(
    store: ObjectStore, tmp_path: Path
) -> None:
    assert_checkpoint_round_trip(store, tmp_path)
