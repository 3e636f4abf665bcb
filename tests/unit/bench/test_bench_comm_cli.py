"""``veritrain bench comm`` refuses settings DiLoCoX cannot send before it trains anything."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--bits", "3"], "OuterConfig.bits must be one of 2, 4, 8, 16, 32, got 3"),
        (["--dense-bits", "4"], "OuterConfig.dense_bits must be 8 or 16, got 4"),
    ],
)
def test_a_width_the_codec_does_not_send_is_refused_by_name(
    option: list[str], message: str
) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "veritrain", "bench", "comm", "--quick", *option],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 2
    assert f"veritrain: error: {message}" in completed.stderr
