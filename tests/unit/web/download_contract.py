"""The download contract of ``GET|HEAD /api/v1/objects/{sha256}``, written once and run
against every way the app hands out bytes: a local file (Starlette ``FileResponse``) in the
unit tests, a stream proxied from S3 in the integration tests.

A test class subclasses :class:`DownloadContract` and provides two fixtures: ``http`` (a
client whose paths start at the app root) and ``blob`` (a :class:`Blob` stored in the app's
store).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from email.parser import BytesParser
from typing import Any

import pytest

IMMUTABLE = "public, max-age=31536000, immutable"


@dataclass(frozen=True)
class Blob:
    digest: str
    data: bytes

    @property
    def url(self) -> str:
        return f"/api/v1/objects/{self.digest}"


def random_blob(size: int = 300_000, seed: int = 7) -> bytes:
    """Bytes spanning several of every server's read chunks (64 KiB files, 1 MiB S3)."""
    return random.Random(seed).randbytes(size)


def multipart_parts(response: Any) -> list[tuple[str, bytes]]:
    """(Content-Range, bytes) of each part of a multipart/byteranges body."""
    head = f"Content-Type: {response.headers['content-type']}\r\n\r\n".encode()
    message = BytesParser().parsebytes(head + response.content)
    assert message.is_multipart()
    return [
        (part["Content-Range"], part.get_payload(decode=True)) for part in message.get_payload()
    ]


class DownloadContract:
    def test_a_whole_object_comes_with_its_digest_as_etag(self, http: Any, blob: Blob) -> None:
        response = http.get(blob.url)

        assert response.status_code == 200
        assert response.content == blob.data
        assert response.headers["etag"] == f'"{blob.digest}"'
        assert response.headers["content-length"] == str(len(blob.data))
        assert response.headers["accept-ranges"] == "bytes"
        assert response.headers["cache-control"] == IMMUTABLE
        assert response.headers["content-type"] == "application/octet-stream"
        assert "last-modified" not in response.headers

    def test_head_has_the_get_headers_and_no_body(self, http: Any, blob: Blob) -> None:
        response = http.head(blob.url)

        assert response.status_code == 200
        assert response.content == b""
        assert response.headers["content-length"] == str(len(blob.data))
        assert response.headers["etag"] == f'"{blob.digest}"'

    @pytest.mark.parametrize(
        ("header", "start", "end"),
        [
            ("bytes=0-0", 0, 1),
            ("bytes=1000-70000", 1000, 70001),
            ("bytes=-1234", 300_000 - 1234, 300_000),
            ("bytes=299990-", 299_990, 300_000),
        ],
    )
    def test_a_single_range_is_206_with_content_range(
        self, http: Any, blob: Blob, header: str, start: int, end: int
    ) -> None:
        response = http.get(blob.url, headers={"Range": header})

        assert response.status_code == 206
        assert response.content == blob.data[start:end]
        assert response.headers["content-range"] == f"bytes {start}-{end - 1}/{len(blob.data)}"
        assert response.headers["content-length"] == str(end - start)
        assert response.headers["etag"] == f'"{blob.digest}"'

    def test_several_ranges_are_one_multipart_byteranges_answer(
        self, http: Any, blob: Blob
    ) -> None:
        response = http.get(blob.url, headers={"Range": "bytes=200000-200099, 0-9, 70000-139999"})

        assert response.status_code == 206
        assert response.headers["content-type"].startswith("multipart/byteranges; boundary=")
        assert response.headers["content-length"] == str(len(response.content))
        size = len(blob.data)
        assert multipart_parts(response) == [
            (f"bytes 0-9/{size}", blob.data[0:10]),
            (f"bytes 70000-139999/{size}", blob.data[70000:140000]),
            (f"bytes 200000-200099/{size}", blob.data[200000:200100]),
        ]

    def test_head_of_a_range_sends_its_headers_only(self, http: Any, blob: Blob) -> None:
        response = http.head(blob.url, headers={"Range": "bytes=10-19"})

        assert response.status_code == 206
        assert response.content == b""
        assert response.headers["content-range"] == f"bytes 10-19/{len(blob.data)}"
        assert response.headers["content-length"] == "10"

    def test_overlapping_ranges_are_merged_into_one(self, http: Any, blob: Blob) -> None:
        response = http.get(blob.url, headers={"Range": "bytes=0-99,50-149"})

        assert response.status_code == 206
        assert response.content == blob.data[:150]

    @pytest.mark.parametrize("header", ["bytes=300000-", "bytes=400000-500000", "bytes=-0"])
    def test_a_range_past_the_end_is_416_naming_the_size(
        self, http: Any, blob: Blob, header: str
    ) -> None:
        response = http.get(blob.url, headers={"Range": header})

        assert response.status_code == 416
        assert response.headers["content-range"] == f"bytes */{len(blob.data)}"

    @pytest.mark.parametrize("header", ["bytes=9-2", "pages=1-2", "bytes=x-y"])
    def test_a_range_the_server_cannot_use_gets_the_whole_object(
        self, http: Any, blob: Blob, header: str
    ) -> None:
        response = http.get(blob.url, headers={"Range": header})

        assert response.status_code == 200
        assert response.content == blob.data

    def test_if_range_with_the_etag_keeps_the_range_and_any_other_validator_does_not(
        self, http: Any, blob: Blob
    ) -> None:
        kept = http.get(blob.url, headers={"Range": "bytes=5-9", "If-Range": f'"{blob.digest}"'})
        changed = http.get(
            blob.url, headers={"Range": "bytes=5-9", "If-Range": '"an-older-version"'}
        )
        dated = http.get(
            blob.url, headers={"Range": "bytes=5-9", "If-Range": "Tue, 01 Jan 2030 00:00:00 GMT"}
        )

        assert (kept.status_code, kept.content) == (206, blob.data[5:10])
        assert (changed.status_code, changed.content) == (200, blob.data)
        assert (dated.status_code, dated.content) == (200, blob.data)

    def test_if_none_match_with_the_etag_is_304_without_a_body(self, http: Any, blob: Blob) -> None:
        response = http.get(blob.url, headers={"If-None-Match": f'W/"{blob.digest}"'})

        assert response.status_code == 304
        assert response.content == b""
        assert response.headers["etag"] == f'"{blob.digest}"'
        assert http.get(blob.url, headers={"If-None-Match": '"other"'}).status_code == 200

    def test_an_interrupted_download_resumes_to_the_right_digest(
        self, http: Any, blob: Blob
    ) -> None:
        received = bytearray()
        with http.stream("GET", blob.url) as first:
            for chunk in first.iter_bytes():
                received += chunk
                if len(received) >= 100_000:
                    break  # the connection drops here
        del received[100_000:]  # what had arrived when it dropped (chunks may be larger)
        etag = first.headers["etag"]
        resumed = http.get(blob.url, headers={"Range": f"bytes={len(received)}-", "If-Range": etag})
        received += resumed.content

        assert resumed.status_code == 206
        assert hashlib.sha256(received).hexdigest() == blob.digest

    def test_an_unknown_object_is_404(self, http: Any, blob: Blob) -> None:
        response = http.get("/api/v1/objects/" + "0" * 64)

        assert response.status_code == 404
        assert "0" * 64 in response.json()["detail"]
        assert http.head("/api/v1/objects/" + "0" * 64).status_code == 404

    @pytest.mark.parametrize(
        "digest",
        [
            "ABCDEF" + "0" * 58,
            "0" * 63,
            "0" * 65,
            "g" * 64,
            "..." + "0" * 61,
            "sha256:" + "0" * 57,
            "%2e%2e" + "0" * 58,
        ],
    )
    def test_a_malformed_digest_is_422_before_any_lookup(
        self, http: Any, blob: Blob, digest: str
    ) -> None:
        response = http.get(f"/api/v1/objects/{digest}")

        assert response.status_code == 422

    @pytest.mark.parametrize(
        "path",
        ["..%2F..%2F..%2Fetc%2Fpasswd", "..%2Fsha256%2F{digest}", "%2e%2e/%2e%2e/etc/passwd"],
    )
    def test_a_path_traversal_never_reaches_a_file(self, http: Any, blob: Blob, path: str) -> None:
        response = http.get("/api/v1/objects/" + path.format(digest=blob.digest))

        assert response.status_code in (404, 422)
        assert b"root:" not in response.content and blob.data[:64] not in response.content
