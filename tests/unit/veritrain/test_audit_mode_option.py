"""``--mode`` of ``veritrain reproduce`` and ``veritrain audit`` (veritrain/cli/audit_mode.py):
a mode the audit does not know is a usage error naming the option, before anything is read."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from veritrain.cli.main import app


@pytest.mark.parametrize(
    "arguments", [["reproduce", "some-run", "--step", "1"], ["audit", "some-run"]]
)
def test_an_unknown_mode_is_a_usage_error(arguments: list[str]) -> None:
    result = CliRunner().invoke(app, [*arguments, "--mode", "bitwize"])

    assert result.exit_code == 2
    assert "expected auto, bitwise or tolerance, got 'bitwize'" in result.output
