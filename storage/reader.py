"""Reading one object back: a stream of chunks that checks what it delivers.

A read that covers the whole object is verified against the object's digest as it streams:
the last chunk is followed by an :class:`IntegrityError` instead of the end of the stream if
the bytes do not hash to the digest, so a consumer that reads to the end is told before it
trusts the data. A ranged read cannot be verified on its own (SHA-256 is not a tree hash: a
slice of an object has no digest to check against); it is only checked for length. A
consumer that needs verified ranges reads the whole object once (``ObjectStore.verify``) or
checks the slice against a higher-level digest (e.g. a safetensors shard's manifest entry).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from storage.closing import Closing
from storage.errors import IntegrityError
from storage.streams import Sha256Stream, check_digest


class ObjectReader(Closing):
    """The bytes ``[start, end)`` of the object stored under ``digest``.

    Iterate for chunks (``for chunk in reader``), or call :meth:`read` like a binary file.
    Close it (or use ``with``) to release the file or HTTP connection when stopping early.
    """

    def __init__(
        self,
        chunks: Iterator[bytes],
        *,
        digest: str,
        start: int,
        end: int,
        object_size: int,
        release: Callable[[], None],
    ) -> None:
        self.digest = digest
        self.start = start
        self.end = end
        self.object_size = object_size
        self._chunks = chunks
        self._release = release
        self._received = 0
        self._done = False
        self._pending = bytearray()
        # Only a read of the whole object has a digest to check against.
        self._hasher = Sha256Stream() if start == 0 and end == object_size else None

    @property
    def length(self) -> int:
        """How many bytes this reader delivers."""
        return self.end - self.start

    @property
    def verifies(self) -> bool:
        """True when the read covers the whole object and is checked against its digest."""
        return self._hasher is not None

    def __iter__(self) -> ObjectReader:
        return self

    def __next__(self) -> bytes:
        if self._pending:
            pending = bytes(self._pending)
            self._pending.clear()
            return pending
        chunk = self._pull()
        if chunk is None:
            raise StopIteration
        return chunk

    def read(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes (all remaining bytes when ``size`` is negative); ``b""`` at the
        end. Raises :class:`IntegrityError` instead of returning the last bytes of a full read
        that does not verify."""
        if size < 0:
            return b"".join(self)
        while len(self._pending) < size:
            chunk = self._pull()
            if chunk is None:
                break
            self._pending += chunk
        data = bytes(self._pending[:size])
        del self._pending[:size]
        return data

    def close(self) -> None:
        """Release the underlying file or connection; further reads return nothing."""
        self._done = True
        self._pending.clear()
        self._release()

    def _pull(self) -> bytes | None:
        """The next chunk from the source, counted and hashed; None once it is exhausted and
        checked."""
        if self._done:
            return None
        try:
            chunk = next(self._chunks)
        except StopIteration:
            self._finish()
            return None
        self._received += len(chunk)
        if self._received > self.length:
            self.close()
            raise IntegrityError(
                f"expected {self.length} bytes of sha256/{self.digest} [{self.start}, {self.end}), "
                f"got more: the stored object is larger than reported"
            )
        if self._hasher is not None:
            self._hasher.update(chunk)
        return chunk

    def _finish(self) -> None:
        # The source is exhausted: release it, then check length and (for full reads) digest
        # before the consumer sees the end of the stream.
        self._done = True
        self._release()
        if self._received != self.length:
            raise IntegrityError(
                f"expected {self.length} bytes of sha256/{self.digest} [{self.start}, {self.end}), "
                f"got {self._received}: the stored object is truncated"
            )
        if self._hasher is not None:
            check_digest(self._hasher.hexdigest(), self.digest, f"object sha256/{self.digest}")
