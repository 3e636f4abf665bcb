"""Key layout and store URLs: pure functions, so user input can never escape the store."""

from __future__ import annotations

import pytest

from storage import open_store
from storage.errors import InvalidDigestError, StoreURLError
from storage.layout import normalize_prefix, object_key, object_relpath, validate_digest

DIGEST = "ab" * 32


def test_objects_are_keyed_sha256_slash_hex_under_the_prefix() -> None:
    assert object_relpath(DIGEST).as_posix() == f"sha256/{DIGEST}"
    assert object_key("", DIGEST) == f"sha256/{DIGEST}"
    assert object_key("runs/objects", DIGEST) == f"runs/objects/sha256/{DIGEST}"


@pytest.mark.parametrize(
    "bad", ["", "AB" * 32, "ab" * 31, "ab" * 33, "../" + "a" * 61, "a" * 63 + "\n"]
)
def test_only_64_lowercase_hex_characters_are_digests(bad: str) -> None:
    with pytest.raises(InvalidDigestError, match="64 lowercase hex"):
        validate_digest(bad)
    with pytest.raises(InvalidDigestError):
        object_key("prefix", bad)


def test_prefixes_lose_stray_slashes_and_refuse_dot_segments() -> None:
    assert normalize_prefix("/a//b/") == "a/b"
    assert normalize_prefix("") == ""
    for bad in ("a/../b", "./a", ".."):
        with pytest.raises(StoreURLError):
            normalize_prefix(bad)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "objects",
        "ftp://host/x",
        "file://",
        "s3://",
        "s3://UPPER/x",
        "s3://ab/x",
        "s3://bucket/x?y=1",
    ],
)
def test_store_urls_other_than_file_and_s3_are_refused(url: str) -> None:
    with pytest.raises(StoreURLError, match="expected"):
        open_store(url)
