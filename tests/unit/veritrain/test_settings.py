from __future__ import annotations

from pathlib import Path

import pytest

from veritrain.errors import SettingsError
from veritrain.settings import load_settings


def test_defaults_are_embedded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VERITRAIN_DATA_DIR", str(tmp_path))
    settings = load_settings()
    assert settings.database_url == f"sqlite:///{tmp_path / 'ledger.db'}"
    assert settings.store_url == f"file://{tmp_path / 'objects'}"
    assert settings.keys_path == tmp_path / "keys"
    assert settings.run_origin("r1") == "veritrain.local/runs/r1"
    assert settings.tee_type == "software"


@pytest.mark.parametrize(
    ("variable", "value", "fragment"),
    [
        (
            "VERITRAIN_DATABASE_URL",
            "mysql://x/y",
            "VERITRAIN_DATABASE_URL: expected a URL starting with sqlite://",
        ),
        (
            "VERITRAIN_STORE_URL",
            "ftp://x",
            "VERITRAIN_STORE_URL: expected a URL starting with file:// or s3://",
        ),
        ("VERITRAIN_STORE_URL", "s3:///prefix-only", "VERITRAIN_STORE_URL: expected s3://<bucket>"),
        ("VERITRAIN_ORIGIN", "has space", "VERITRAIN_ORIGIN: expected a non-empty name"),
        # No back-end is registered for it (attestation/registry.py).
        ("VERITRAIN_TEE_TYPE", "sev-snp", "VERITRAIN_TEE_TYPE: expected one of software"),
    ],
)
def test_bad_settings_fail_with_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, fragment: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message
