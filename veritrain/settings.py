"""Runtime settings, read from the environment (prefix ``VERITRAIN_``), DESIGN.md §2.

Defaults are the embedded, zero set-up ones: a SQLite ledger and a local object folder
under ``./veritrain-data``. Production points ``VERITRAIN_DATABASE_URL`` at PostgreSQL and
``VERITRAIN_STORE_URL`` at an S3 bucket. A bad value fails at start-up with one line that
names the variable and says what was expected (see :func:`load_settings`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from attestation.registry import DEFAULT_TEE_TYPE, registered_tee_types
from veritrain.errors import SettingsError
from veritrain.witnesses.endpoints import WitnessEndpoint, parse_witnesses

_DB_SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg")
_STORE_SCHEMES = ("file", "s3")


class Settings(BaseSettings):
    """Everything a veritrain process needs to find its ledger, its objects and its keys."""

    model_config = SettingsConfigDict(env_prefix="VERITRAIN_", extra="ignore")

    data_dir: Path = Field(default=Path("./veritrain-data"))
    """Root of the embedded defaults: ledger.db, objects/, keys/, corpus/ live below it."""

    database_url: str = ""
    """SQLAlchemy URL of the ledger; default ``sqlite:///<data_dir>/ledger.db``."""

    store_url: str = ""
    """Object store: ``file://<path>`` or ``s3://<bucket>[/<prefix>]``; default ``file://<data_dir>/objects``."""

    origin: str = "veritrain.local"
    """Log origin prefix; a run's log origin is ``<origin>/runs/<run_id>`` (C2SP
    tlog-checkpoint)."""

    key_dir: Path | None = None
    """Where the log, attester and platform keys live; default ``<data_dir>/keys``."""

    s3_presign_downloads: bool = True
    """When the store is S3, answer object downloads with a 302 to a presigned URL instead of
    proxying."""

    tee_type: str = DEFAULT_TEE_TYPE
    """The TEE back-end new runs attest with (attestation/registry.py): ``software`` unless a
    hardware back-end is installed and this host has that hardware."""

    witnesses: Annotated[tuple[WitnessEndpoint, ...], NoDecode] = ()
    """C2SP tlog-witnesses that cosign every run's tree heads: ``VKEY@URL`` items separated by
    spaces or commas (veritrain/witnesses/endpoints.py); empty: none."""

    @field_validator("witnesses", mode="before")
    @classmethod
    def _parse_witnesses(cls, value: object) -> object:
        return parse_witnesses(value) if isinstance(value, str) else value

    @field_validator("tee_type")
    @classmethod
    def _tee_type_is_registered(cls, value: str) -> str:
        registered = registered_tee_types()
        if value not in registered:
            raise ValueError(f"expected one of {', '.join(registered)}, got {value!r}")
        return value

    @field_validator("origin")
    @classmethod
    def _origin_is_a_name(cls, value: str) -> str:
        # C2SP signed-note key names and checkpoint origins must be non-empty and contain no
        # whitespace or '+' (the separator of verifier-key strings).
        if not value or any(c.isspace() or c == "+" for c in value):
            raise ValueError(f"expected a non-empty name without spaces or '+', got {value!r}")
        return value

    @model_validator(mode="after")
    def _fill_defaults_and_check_urls(self) -> Settings:
        if not self.database_url:
            self.database_url = f"sqlite:///{self.data_dir / 'ledger.db'}"
        if not self.store_url:
            self.store_url = f"file://{self.data_dir / 'objects'}"
        if self.key_dir is None:
            self.key_dir = self.data_dir / "keys"
        _check_url("VERITRAIN_DATABASE_URL", self.database_url, _DB_SCHEMES)
        _check_url("VERITRAIN_STORE_URL", self.store_url, _STORE_SCHEMES)
        if self.store_url.startswith("s3:") and not urlsplit(self.store_url).netloc:
            raise ValueError(
                f"VERITRAIN_STORE_URL: expected s3://<bucket>[/<prefix>], got {self.store_url!r}"
            )
        return self

    @property
    def keys_path(self) -> Path:
        assert self.key_dir is not None  # filled by the validator
        return self.key_dir

    def run_origin(self, run_id: str) -> str:
        """The C2SP log origin of one run."""
        return f"{self.origin}/runs/{run_id}"


def _check_url(variable: str, url: str, schemes: tuple[str, ...]) -> None:
    scheme = urlsplit(url).scheme
    if scheme not in schemes:
        raise ValueError(
            f"{variable}: expected a URL starting with "
            f"{' or '.join(s + '://' for s in schemes)}, got {url!r}"
        )


def load_settings(**overrides: object) -> Settings:
    """Read the settings, turning any validation problem into one :class:`SettingsError` line."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        if not first["loc"]:  # a whole-model check already names its variable
            raise SettingsError(message) from None
        field = ".".join(str(p) for p in first["loc"])
        raise SettingsError(f"VERITRAIN_{field.upper()}: {message}") from None
