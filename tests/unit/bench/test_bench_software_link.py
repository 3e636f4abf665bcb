"""The software link model: transfers queue on one cluster's link at its rate."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from veritrain.bench.software_shaper import LinkModel


def test_transfers_on_one_link_queue_behind_each_other(tmp_path: Path) -> None:
    link = LinkModel(tmp_path / "cluster-0.link", rate=1000.0)
    before = time.monotonic()
    first = link.reserve(2000)  # 2 s of link time
    second = link.reserve(500)  # starts when the first is through
    assert first >= before + 2.0
    assert second == pytest.approx(first + 0.5)


def test_a_second_process_sees_the_same_link(tmp_path: Path) -> None:
    path = tmp_path / "cluster-1.link"
    first = LinkModel(path, rate=100.0).reserve(100)
    again = LinkModel(path, rate=100.0).reserve(100)  # a fresh object, as another rank holds
    assert again == pytest.approx(first + 1.0)


def test_separate_clusters_do_not_share_a_link(tmp_path: Path) -> None:
    a = LinkModel(tmp_path / "cluster-0.link", rate=10.0).reserve(100)
    b = LinkModel(tmp_path / "cluster-1.link", rate=10.0).reserve(100)
    assert abs(a - b) < 1.0  # both about 10 s from now, not 20
