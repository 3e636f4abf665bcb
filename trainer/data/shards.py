"""Token shards: fixed-size, headerless little-endian integer files, named by their digest.

Format (so an auditor can hash and read a shard without our code)::

    <sha256>.bin = token_0 token_1 ... token_{n-1}      n = shard_tokens, no header
    each token an unsigned little-endian integer: uint16 when the vocabulary fits in 65,536
    ids, uint32 otherwise (the manifest says which)

    numpy.fromfile("<sha256>.bin", dtype="<u2")   # reads one back

The trainer reads shards only through :class:`ShardSource`, so the recorder side can serve
them from downloaded objects; :class:`DirectoryShardSource` is the folder-backed one. The same
folder (and source) also holds the corpus's ``tokenizer.json`` when it has one, under the same
``<sha256>.bin`` naming (trainer/data/tokenizer.py).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from records.data_manifest import CHUNK_BYTES, Shard, TokenDtype, chunk_index
from trainer.errors import DataError

_NUMPY_DTYPES: dict[str, str] = {"uint16": "<u2", "uint32": "<u4"}


ShardInfo = Shard
"""One shard as the manifest lists it (records.data_manifest.Shard)."""


def token_dtype(vocab_size: int) -> TokenDtype:
    """The smallest shard integer type that holds every id of the vocabulary."""
    return "uint16" if vocab_size <= 2**16 else "uint32"


def shard_file_name(sha256: str) -> str:
    return f"{sha256}.bin"


class ShardWriter:
    """Cuts a stream of token arrays into full shards of ``shard_tokens`` and writes them to
    ``directory``. Memory stays at one shard: tokens are copied into a preallocated buffer that
    is written out whenever it fills."""

    def __init__(self, *, shard_tokens: int, dtype: TokenDtype, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.shard_tokens = shard_tokens
        self.shards: list[ShardInfo] = []
        self._buffer = np.empty(shard_tokens, dtype=_NUMPY_DTYPES[dtype])
        self._filled = 0

    @property
    def pending_tokens(self) -> int:
        """Tokens in the buffer that do not (yet) fill a shard: the tail dropped at the end."""
        return self._filled

    def add(self, tokens: np.ndarray | Sequence[int]) -> None:
        values = np.asarray(tokens)
        if values.size and (values.min() < 0 or values.max() > np.iinfo(self._buffer.dtype).max):
            raise DataError(
                f"expected token ids that fit {self._buffer.dtype}, "
                f"got {values.min()}..{values.max()}"
            )
        start = 0
        while start < values.size:
            take = min(self.shard_tokens - self._filled, values.size - start)
            self._buffer[self._filled : self._filled + take] = values[start : start + take]
            self._filled += take
            start += take
            if self._filled == self.shard_tokens:
                data = self._buffer.tobytes()
                digest = write_content(data, self.directory)
                # The chunk index lets a re-executor fetch and verify single windows
                # (records/data_manifest.py).
                chunks = write_content(chunk_index(data, CHUNK_BYTES), self.directory)
                self.shards.append(
                    ShardInfo(
                        index=len(self.shards),
                        sha256=digest,
                        tokens=self.shard_tokens,
                        chunks=chunks,
                    )
                )
                self._filled = 0


def write_shards(
    documents: Iterable[np.ndarray | Sequence[int]],
    *,
    shard_tokens: int,
    dtype: TokenDtype,
    directory: Path,
) -> tuple[list[ShardInfo], int]:
    """Concatenate the documents' tokens, cut the stream into full shards of ``shard_tokens``
    and write them to ``directory``. Returns the shards and the number of tail tokens dropped
    (too few for a full shard). Streams: memory stays at about one shard."""
    writer = ShardWriter(shard_tokens=shard_tokens, dtype=dtype, directory=directory)
    for document in documents:
        writer.add(document)
    return writer.shards, writer.pending_tokens


def write_content(data: bytes, directory: Path) -> str:
    """Store ``data`` as ``<directory>/<sha256>.bin`` (atomically; a file already there is the
    same bytes) and return the digest. Shards and the corpus's tokenizer.json are stored so."""
    digest = hashlib.sha256(data).hexdigest()
    path = directory / shard_file_name(digest)
    if not path.exists():
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_bytes(data)
        temporary.replace(path)  # atomic: a file is either whole or absent
    return digest


def decode_shard(data: bytes, *, info: ShardInfo, dtype: TokenDtype) -> np.ndarray:
    """The tokens of a shard's bytes, after checking its digest and length."""
    digest = hashlib.sha256(data).hexdigest()
    if digest != info.sha256:
        raise DataError(f"expected shard {info.index} to have sha256 {info.sha256}, got {digest}")
    values = np.frombuffer(data, dtype=_NUMPY_DTYPES[dtype])
    if values.size != info.tokens:
        raise DataError(
            f"expected shard {info.index} to hold {info.tokens} tokens, got {values.size}"
        )
    return values


class ShardSource(Protocol):
    """Where the trainer reads shard bytes from (a folder, a download cache, an object store)."""

    def read(self, sha256: str) -> bytes:
        """The bytes of the shard with this digest (the caller verifies them)."""
        ...


@runtime_checkable
class WindowSource(Protocol):
    """A source that holds only some windows of some shards (a re-executor that downloaded
    what one step reads): the reader asks it for windows instead of whole shards."""

    def window(self, info: ShardInfo, dtype: TokenDtype, start: int, length: int) -> np.ndarray:
        """Tokens ``[start, start + length)`` of the shard, verified by the source (a window
        it does not hold is a ``DataError``, never made-up tokens)."""
        ...


@dataclass(frozen=True)
class DirectoryShardSource:
    """Shards stored as ``<directory>/<sha256>.bin``. Picklable, so spawned processes get it."""

    directory: Path

    def read(self, sha256: str) -> bytes:
        path = self.directory / shard_file_name(sha256)
        if not path.is_file():
            raise DataError(f"expected shard {sha256} at {path}, the file is missing")
        return path.read_bytes()
