"""The documents of one source file, read as a stream in bounded memory.

Each format yields :class:`Piece` s -- text plus whether a document ends there (the builder
appends the end-of-text token after it):

* **text** (``.txt .py .md .rst .text``, and the stdlib's ``.py``): the whole file is one
  document, decoded as UTF-8 (invalid bytes become U+FFFD), read in 1 MiB chunks. A long file
  is handed on in pieces, each cut just before a space that sits between two ASCII letters
  (``"word| next"``), when the tokenizer says such cuts give the tokens of the whole text
  (``Tokenizer.exact_in_pieces``: bytes, and the trained BPE, whose GPT-2 pre-tokenizer
  regex has no look-behind and always ends a letter run at that space and starts
  `` ?\\p{L}+`` on it). Otherwise -- a given tokenizer file, or text with no such space, like
  unspaced scripts -- the file is held whole.
* **JSON Lines** (``.jsonl``; ``.jsonl.gz`` through gzip, line by line): one object per
  line, its ``text_field`` a document; blank lines are skipped; lines count from 1.
* **Parquet** (``.parquet``, pyarrow): the ``text_field`` column only, read in record batches
  of 1,024 rows without pre-buffering whole column chunks; rows count from 0, as in
  pyarrow and pandas.

Every reader checks the file's bytes against the source's recorded SHA-256: text and JSON Lines
hash the bytes as they stream past and check at the end of the file; a Parquet file is read
from its footer backwards, so it is hashed in one streamed pass before it is opened. A
malformed line, a missing or non-string field, a null cell, a corrupt gzip stream and an
unreadable Parquet file are each a :class:`DataError` naming the source (and the line or row).
"""

from __future__ import annotations

import codecs
import contextlib
import gzip
import hashlib
import io
import json
import zlib
from collections.abc import Iterable, Iterator
from typing import IO, Any, BinaryIO, NamedTuple

from trainer.data.sources import READ_CHUNK, Source, file_digest
from trainer.errors import DataError

PARQUET_BATCH_ROWS = 1024


class Piece(NamedTuple):
    """Some text of a document, in order; ``ends_document`` on the last piece of each."""

    text: str
    ends_document: bool


def pieces(source: Source, *, text_field: str, cut_text: bool) -> Iterator[Piece]:
    """The pieces of ``source`` in order (see the module docstring). ``cut_text``: long text
    files may be handed on in pieces (only when the tokenizer is ``exact_in_pieces``)."""
    if source.format == "parquet":
        yield from _parquet(source, text_field)
    elif source.format in ("jsonl", "jsonl.gz"):
        yield from _json_lines(source, text_field, compressed=source.format == "jsonl.gz")
    else:
        yield from _text(source, cut=cut_text)


def _text(source: Source, *, cut: bool) -> Iterator[Piece]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    held: list[str] = []  # text read but not yet handed on (joined once, never re-copied)
    with _verified(source) as raw:
        while chunk := raw.read(READ_CHUNK):
            text = decoder.decode(chunk)
            at = _cut_point(text) if cut else -1
            if at > 0:
                yield Piece("".join([*held, text[:at]]), False)
                held = [text[at:]]
            else:
                held.append(text)
        held.append(decoder.decode(b"", final=True))
    yield Piece("".join(held), True)


def _cut_point(text: str) -> int:
    """Index of the last space in ``text`` that has an ASCII letter on each side, or -1."""
    end = len(text) - 1
    while (i := text.rfind(" ", 1, end)) != -1:
        if _ascii_letter(text[i - 1]) and _ascii_letter(text[i + 1]):
            return i
        end = i
    return -1


def _ascii_letter(char: str) -> bool:
    return "a" <= char <= "z" or "A" <= char <= "Z"


def _json_lines(source: Source, field: str, *, compressed: bool) -> Iterator[Piece]:
    with _verified(source) as raw:
        lines: Iterable[bytes] = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
        for number, line in _numbered_lines(lines, source):
            if not line.strip():
                continue
            try:
                record = json.loads(line.decode("utf-8", errors="replace"))
            except json.JSONDecodeError as exc:
                raise DataError(
                    f"expected JSON on line {number} of {source.uri}, got: {exc}"
                ) from exc
            if not isinstance(record, dict):
                raise DataError(
                    f"expected a JSON object on line {number} "
                    f"of {source.uri}, got {_json_type(record)}"
                )
            if field not in record:
                keys = ", ".join(repr(k) for k in list(record)[:8]) or "none"
                raise DataError(
                    f"expected a {field!r} field on line {number} "
                    f"of {source.uri}, the object has {keys}"
                    " (--text-field names the field)"
                )
            text = record[field]
            if not isinstance(text, str):
                raise DataError(
                    f"expected a string in {field!r} on line "
                    f"{number} of {source.uri}, got {_json_type(text)}"
                )
            yield Piece(text, True)


def _numbered_lines(stream: Iterable[bytes], source: Source) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, line) of a byte stream; a corrupt or truncated gzip stream is a
    DataError naming the source."""
    number = 0
    try:
        for number, line in enumerate(stream, start=1):
            yield number, line
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        _check_digest(source, file_digest(source.path)[0])  # a file that changed says so first
        raise DataError(
            f"expected a readable gzip file at {source.uri}, got {exc!r} after line {number}"
        ) from exc


def _parquet(source: Source, field: str) -> Iterator[Piece]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    digest, _ = file_digest(source.path)
    _check_digest(source, digest)
    try:
        parquet = pq.ParquetFile(source.path, pre_buffer=False, buffer_size=READ_CHUNK)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"expected a readable Parquet file at {source.uri}, got: {exc}") from exc
    schema = parquet.schema_arrow
    if schema.get_field_index(field) < 0:
        columns = ", ".join(repr(name) for name in schema.names[:8]) or "none"
        raise DataError(
            f"expected a column {field!r} in {source.uri}, "
            f"it has {columns} (--text-field names the column)"
        )
    column_type = schema.field(field).type
    if pa.types.is_dictionary(column_type):
        column_type = column_type.value_type
    if not (
        pa.types.is_string(column_type)
        or pa.types.is_large_string(column_type)
        or pa.types.is_string_view(column_type)
    ):
        raise DataError(
            f"expected strings in column {field!r} of {source.uri}, got type {column_type}"
        )
    row = 0
    try:
        for batch in parquet.iter_batches(
            batch_size=PARQUET_BATCH_ROWS, columns=[field], use_threads=False
        ):
            values = batch.column(0)
            if values.null_count:
                first = row + values.is_null().to_pylist().index(True)
                raise DataError(
                    f"expected a string in column {field!r} at row {first} of {source.uri} "
                    "(rows count from 0), got null"
                )
            for text in values.to_pylist():
                yield Piece(text, True)
            row += batch.num_rows
    except (pa.ArrowException, OSError) as exc:
        raise DataError(
            f"expected a readable Parquet file at {source.uri}, got {exc} after row {row}"
        ) from exc


class _HashingReader(io.RawIOBase):
    """A file's bytes, hashed as they are read."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self.hasher = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = self._stream.readinto(buffer)  # type: ignore[attr-defined]
        self.hasher.update(memoryview(buffer)[:count])
        return int(count)


@contextlib.contextmanager
def _verified(source: Source) -> Iterator[BinaryIO]:
    """The source's bytes as a buffered stream; on a clean exit the rest of the file is
    hashed and the digest checked against the recorded one."""
    with source.path.open("rb", buffering=0) as stream:
        hashing = _HashingReader(stream)
        reader = io.BufferedReader(hashing, buffer_size=READ_CHUNK)
        yield reader
        while reader.read(READ_CHUNK):
            pass
        _check_digest(source, hashing.hasher.hexdigest())


def _check_digest(source: Source, digest: str) -> None:
    if digest != source.sha256:
        raise DataError(
            f"expected {source.uri} to have sha256 {source.sha256}, got {digest} (it changed)"
        )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "an array",
        dict: "an object",
    }.get(type(value), type(value).__name__)
