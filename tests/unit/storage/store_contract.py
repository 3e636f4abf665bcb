"""The behaviour every ObjectStore back-end must show, written once.

A back-end's test module subclasses :class:`StoreContract` and provides four fixtures:

- ``store``: a fresh, empty store;
- ``tamper(digest, data)``: replace the stored bytes behind the store's back (disk or raw S3
  client), as corruption or an attacker would;
- ``write_raw(digest, data)``: the back-end's low-level write-once primitive, which takes a
  key and bytes without hashing them (the public ``put`` can never aim different bytes at an
  existing key, so this is the only way to test the refusal);
- ``leftovers()``: what a failed write may have left behind (temporary files, unfinished
  multipart uploads); it must be empty after every failure.

The local store runs this suite in tests/unit/storage, S3 (SeaweedFS) in tests/integration.
(tests/ is on sys.path through the root conftest, so both import it as ``unit.storage``.)
"""

from __future__ import annotations

import hashlib
import io
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from unit.storage.payloads import deterministic_chunks

from storage import ObjectStore
from storage.errors import (
    IntegrityError,
    InvalidDigestError,
    InvalidRangeError,
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectTooLargeError,
)

Tamper = Callable[[str, bytes], None]
WriteRaw = Callable[[str, bytes], None]
Leftovers = Callable[[], list[str]]

DATA = b"the quick brown fox jumps over the lazy dog\n" * 50  # 2,200 bytes
MiB = 1 << 20

BAD_DIGESTS = [
    "",
    "abc",
    "A" * 64,  # uppercase: one object, one spelling
    "g" * 64,
    "0" * 63,
    "0" * 65,
    "../../etc/passwd" + "0" * 48,
    "0" * 62 + "/x",
]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def failing_source(chunks: int) -> Iterator[bytes]:
    """A source that breaks after some chunks, as a dropped network stream would."""
    yield from deterministic_chunks(chunks * MiB, seed=7)
    raise OSError("source went away")


class StoreContract:
    # --- writing ------------------------------------------------------------------------

    def test_put_bytes_returns_the_sha256_and_the_object_reads_back(
        self, store: ObjectStore
    ) -> None:
        digest = store.put_bytes(DATA)

        assert digest == sha256(DATA)
        assert store.exists(digest)
        assert store.size(digest) == len(DATA)
        assert store.read_bytes(digest, max_size=len(DATA)) == DATA

    def test_put_takes_file_objects_and_chunk_iterables(self, store: ObjectStore) -> None:
        chunks = [DATA[:1000], b"", DATA[1000:]]

        assert store.put(io.BytesIO(DATA)) == sha256(DATA)
        assert store.put(iter(chunks)) == sha256(DATA)
        assert store.read_bytes(sha256(DATA), max_size=len(DATA)) == DATA

    def test_put_file_stores_the_file(self, store: ObjectStore, tmp_path: Path) -> None:
        path = tmp_path / "blob"
        path.write_bytes(DATA * 3)

        digest = store.put_file(path)

        assert digest == sha256(DATA * 3)
        assert store.read_bytes(digest, max_size=10 * len(DATA)) == DATA * 3

    def test_the_empty_object_round_trips(self, store: ObjectStore) -> None:
        digest = store.put(iter([]))

        assert digest == sha256(b"")
        assert store.size(digest) == 0
        assert store.read_bytes(digest, max_size=0) == b""

    def test_putting_the_same_bytes_again_is_a_no_op(self, store: ObjectStore) -> None:
        first = store.put_bytes(DATA)
        second = store.put(io.BytesIO(DATA))
        third = store.put(io.BytesIO(DATA), expected_sha256=first)

        assert first == second == third
        assert store.read_bytes(first, max_size=len(DATA)) == DATA

    def test_put_with_the_expected_digest_stores_the_stream(self, store: ObjectStore) -> None:
        chunks = [DATA[i : i + 100] for i in range(0, len(DATA), 100)]

        digest = store.put(iter(chunks), expected_sha256=sha256(DATA))

        assert digest == sha256(DATA)
        assert store.read_bytes(digest, max_size=len(DATA)) == DATA

    @pytest.mark.parametrize("size", [len(DATA), 12 * MiB], ids=["small", "multipart"])
    def test_put_with_a_wrong_expected_digest_stores_nothing(
        self, store: ObjectStore, leftovers: Leftovers, size: int
    ) -> None:
        claimed = sha256(b"something else")

        with pytest.raises(IntegrityError, match=claimed):
            store.put(deterministic_chunks(size, seed=3), expected_sha256=claimed)

        actual = sha256(b"".join(deterministic_chunks(size, seed=3)))
        assert not store.exists(claimed)
        assert not store.exists(actual)
        assert leftovers() == []

    @pytest.mark.parametrize("expected", [False, True], ids=["spooled", "streamed"])
    def test_a_source_that_fails_midway_stores_nothing(
        self, store: ObjectStore, leftovers: Leftovers, expected: bool
    ) -> None:
        whole = b"".join(deterministic_chunks(12 * MiB, seed=7))
        claimed = sha256(whole) if expected else None

        with pytest.raises(OSError, match="source went away"):
            store.put(failing_source(12), expected_sha256=claimed)

        assert not store.exists(sha256(whole))
        assert leftovers() == []

    # --- digests ------------------------------------------------------------------------

    @pytest.mark.parametrize("bad", BAD_DIGESTS)
    def test_malformed_digests_are_refused_before_any_lookup(
        self, store: ObjectStore, bad: str
    ) -> None:
        calls: list[Callable[[], object]] = [
            lambda: store.exists(bad),
            lambda: store.size(bad),
            lambda: store.open(bad),
            lambda: store.read_bytes(bad, max_size=10),
            lambda: store.verify(bad),
            lambda: store.local_path(bad),
            lambda: store.presigned_url(bad),
            lambda: store.put(io.BytesIO(b"x"), expected_sha256=bad),
        ]
        for call in calls:
            with pytest.raises(InvalidDigestError):
                call()

    def test_a_missing_object_is_reported_as_not_found(self, store: ObjectStore) -> None:
        missing = sha256(b"never stored")

        assert not store.exists(missing)
        for call in (
            lambda: store.size(missing),
            lambda: store.open(missing),
            lambda: store.open(missing, 1, 2),
            lambda: store.read_bytes(missing, max_size=10),
            lambda: store.verify(missing),
        ):
            with pytest.raises(ObjectNotFoundError, match=missing):
                call()

    # --- reading ------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("start", "end"),
        [
            (None, None),
            (0, 10),
            (5, 17),
            (len(DATA) - 1, None),
            (100, None),
            (None, 100),
            (3, 3),
            (0, len(DATA) + 100),  # end is clamped like a Python slice
            (len(DATA), None),  # empty, at the very end
        ],
    )
    def test_ranged_reads_return_the_slice(
        self, store: ObjectStore, start: int | None, end: int | None
    ) -> None:
        digest = store.put_bytes(DATA)

        with store.open(digest, start, end) as reader:
            got = b"".join(reader)

        assert got == DATA[start:end]
        assert reader.length == len(got)
        assert reader.object_size == len(DATA)

    @pytest.mark.parametrize(("start", "end"), [(-1, None), (5, 3), (len(DATA) + 1, None)])
    def test_impossible_ranges_are_refused(
        self, store: ObjectStore, start: int, end: int | None
    ) -> None:
        digest = store.put_bytes(DATA)

        with pytest.raises(InvalidRangeError):
            store.open(digest, start, end)

    def test_a_reader_reads_like_a_binary_file(self, store: ObjectStore) -> None:
        digest = store.put_bytes(DATA)

        with store.open(digest) as reader:
            parts = [reader.read(3), reader.read(1000), reader.read()]

        assert parts[0] == DATA[:3]
        assert len(parts[1]) == 1000
        assert b"".join(parts) == DATA
        assert reader.read(10) == b""

    def test_read_bytes_refuses_objects_over_the_limit(self, store: ObjectStore) -> None:
        digest = store.put_bytes(DATA)

        with pytest.raises(ObjectTooLargeError, match=str(len(DATA))):
            store.read_bytes(digest, max_size=len(DATA) - 1)

    # --- integrity ------------------------------------------------------------------------

    def test_a_corrupted_object_fails_its_full_read_at_the_end(
        self, store: ObjectStore, tamper: Tamper
    ) -> None:
        big = b"".join(deterministic_chunks(3 * MiB, seed=1))
        digest = store.put_bytes(big)
        forged = bytearray(big)
        forged[-1] ^= 0x01
        tamper(digest, bytes(forged))

        received = bytearray()
        with pytest.raises(IntegrityError, match=digest), store.open(digest) as reader:
            assert reader.verifies
            for chunk in reader:
                received += chunk
        # Every byte was delivered, and the consumer was told before the stream ended.
        assert bytes(received) == bytes(forged)
        with pytest.raises(IntegrityError):
            store.read_bytes(digest, max_size=len(big))
        with pytest.raises(IntegrityError):
            store.verify(digest)

    def test_a_ranged_read_cannot_detect_corruption(
        self, store: ObjectStore, tamper: Tamper
    ) -> None:
        # The documented limit: a slice has no digest of its own to check against.
        digest = store.put_bytes(DATA)
        tamper(digest, DATA.upper())

        with store.open(digest, 0, 10) as reader:
            assert not reader.verifies
            assert b"".join(reader) == DATA.upper()[:10]

    def test_a_truncated_object_is_detected_on_read_and_on_put(
        self, store: ObjectStore, tamper: Tamper
    ) -> None:
        digest = store.put_bytes(DATA)
        tamper(digest, DATA[:100])

        with pytest.raises(IntegrityError):
            store.verify(digest)
        # Write-once: putting the right bytes again cannot repair it, and must not pretend to.
        with pytest.raises(IntegrityError, match="damaged"):
            store.put_bytes(DATA)  # digest known up front
        with pytest.raises(IntegrityError, match="damaged"):
            store.put(io.BytesIO(DATA))  # digest known only at the end

    def test_write_once_refuses_different_bytes_under_an_existing_key(
        self, store: ObjectStore, write_raw: WriteRaw
    ) -> None:
        digest = store.put_bytes(DATA)

        with pytest.raises(ObjectExistsError):
            write_raw(digest, b"replacement bytes")
        with pytest.raises(ObjectExistsError):
            write_raw(digest, DATA.upper())  # same size, different bytes

        assert store.read_bytes(digest, max_size=len(DATA)) == DATA

    # --- large objects ------------------------------------------------------------------

    @pytest.mark.parametrize("expected", [False, True], ids=["spooled", "streamed"])
    def test_an_object_over_64_mib_round_trips_in_bounded_memory(
        self, store: ObjectStore, expected: bool
    ) -> None:
        size = 70 * MiB
        digest = sha256(b"".join(deterministic_chunks(size, seed=11)))

        tracemalloc.start()
        try:
            stored = store.put(
                deterministic_chunks(size, seed=11), expected_sha256=digest if expected else None
            )
            _, put_peak = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            hasher = hashlib.sha256()
            with store.open(stored) as reader:
                for chunk in reader:
                    hasher.update(chunk)
            _, read_peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()

        assert stored == digest
        assert hasher.hexdigest() == digest
        assert store.size(digest) == size
        # Python-level allocations stay far below the object's size: a few S3 parts (the
        # suite's S3 store uses 5 MiB parts), a few 1 MiB chunks for the local store.
        assert put_peak < 32 * MiB, f"put peaked at {put_peak / MiB:.1f} MiB"
        assert read_peak < 8 * MiB, f"read peaked at {read_peak / MiB:.1f} MiB"
