"""What the web app needs to know, as a structural type.

``web/`` must not import ``veritrain/`` (DESIGN.md §1), so it cannot name
``veritrain.settings.Settings``. :class:`WebSettings` lists the attributes the app reads;
``Settings`` satisfies it structurally, and :class:`AppSettings` is a plain dataclass for
embedding the app elsewhere (tests, benchmarks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class WebSettings(Protocol):
    """The settings :func:`web.app.create_app` reads (read-only attributes)."""

    @property
    def database_url(self) -> str:
        """SQLAlchemy URL of the ledger (``VERITRAIN_DATABASE_URL``)."""
        ...

    @property
    def store_url(self) -> str:
        """``file://<path>`` or ``s3://<bucket>[/<prefix>]`` (``VERITRAIN_STORE_URL``)."""
        ...

    @property
    def origin(self) -> str:
        """Log origin prefix (``VERITRAIN_ORIGIN``), shown on the page."""
        ...

    @property
    def s3_presign_downloads(self) -> bool:
        """With an S3 store: answer downloads with a 302 to a presigned URL (True) or stream
        them through the app (False)."""
        ...


@dataclass(frozen=True, kw_only=True)
class AppSettings:
    """A :class:`WebSettings` for callers without ``veritrain.settings``."""

    database_url: str
    """SQLAlchemy URL of the ledger."""
    store_url: str
    """Object store URL."""
    origin: str = "veritrain.local"
    """Log origin prefix."""
    s3_presign_downloads: bool = True
    """Redirect S3 downloads to presigned URLs instead of proxying them."""
