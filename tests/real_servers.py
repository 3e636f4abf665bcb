"""Handles on the real servers the integration tests use (imported by tests/conftest.py and by
tests that annotate with them; a test never imports ``conftest`` itself, since several exist)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"

    def client(self):  # type: ignore[no-untyped-def]
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
        )
