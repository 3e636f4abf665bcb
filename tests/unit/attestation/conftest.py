"""Fixtures for the attestation unit tests."""

from __future__ import annotations

import pytest
from attestation_scenario import Scenario, make_scenario


@pytest.fixture
def scenario() -> Scenario:
    return make_scenario()
