"""A synthetic text corpus for the data benchmark, written as JSON Lines (gzip) and Parquet.

Word-like rather than random bytes, so a BPE has something to learn and the pre-tokenizer sees
realistic pieces: a lexicon of 30,000 pseudo-words built from syllables (a few with accents,
so the text is not pure ASCII), drawn with Zipf-like frequencies (Zipf 1935; exponent 1.2)
into a pool of 20,000 sentences of 4-24 words, a fifth of them carrying a number up to
99,999; each document is 3-60 sentences drawn uniformly from the pool (about 2 KB on
average). Everything comes from one seeded generator, so the same size and seed write the
same files. The corpus is split evenly between the formats asked for, in files of at most
128 MiB of text each: ``{"id", "text"}`` JSON Lines compressed with gzip level 6 (the
command-line default), and Parquet with zstd and a row group per 8,192 documents.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

CorpusFormat = Literal["jsonl.gz", "parquet"]
FORMATS: tuple[CorpusFormat, ...] = ("jsonl.gz", "parquet")
FILE_TEXT_BYTES = 128 * 2**20
BATCH_DOCUMENTS = 8_192
_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "te",
    "vo",
    "ba",
    "di",
    "fu",
    "ge",
    "hi",
    "jo",
    "pe",
    "qu",
    "ri",
    "st",
    "th",
    "an",
    "er",
    "in",
    "on",
    "ou",
    "ch",
    "sh",
    "tr",
    "bl",
    "gr",
    "é",
    "ü",
    "ø",
)


@dataclass(frozen=True, kw_only=True)
class SyntheticCorpus:
    """What was written."""

    folder: Path
    files: list[Path]
    text_bytes: int
    """UTF-8 bytes of the documents' text (what a tokenizer reads)."""
    file_bytes: int
    """Bytes on disk (compressed)."""
    documents: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": len(self.files),
            "text_bytes": self.text_bytes,
            "file_bytes": self.file_bytes,
            "documents": self.documents,
        }


def write_corpus(
    folder: Path, *, text_bytes: int, formats: Sequence[CorpusFormat] = FORMATS, seed: int = 0
) -> SyntheticCorpus:
    """Write about ``text_bytes`` of documents under ``folder`` (see the module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    documents = _documents(np.random.default_rng(seed))
    files: list[Path] = []
    written = count = 0
    share = text_bytes // len(formats)
    for fmt in formats:
        remaining = share
        while remaining > 0:
            path = folder / f"part-{len(files):04d}.{fmt}"
            size, n = _write_file(
                path, fmt, documents, min(remaining, FILE_TEXT_BYTES), first_id=count
            )
            files.append(path)
            remaining -= size
            written += size
            count += n
    return SyntheticCorpus(
        folder=folder,
        files=files,
        text_bytes=written,
        file_bytes=sum(p.stat().st_size for p in files),
        documents=count,
    )


def _write_file(
    path: Path, fmt: CorpusFormat, documents: Iterator[str], budget: int, *, first_id: int
) -> tuple[int, int]:
    """Write documents until ``budget`` text bytes are reached; (text bytes, documents)."""
    size = count = 0
    if fmt == "jsonl.gz":
        with gzip.open(path, "wb", compresslevel=6) as sink:
            while size < budget:
                batch = _batch(documents, budget - size)
                sink.write(
                    "".join(
                        json.dumps({"id": first_id + count + i, "text": text}) + "\n"
                        for i, text in enumerate(batch)
                    ).encode()
                )
                size += sum(len(text.encode()) for text in batch)
                count += len(batch)
        return size, count
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        while size < budget:
            batch = _batch(documents, budget - size)
            ids = list(range(first_id + count, first_id + count + len(batch)))
            writer.write_table(pa.table({"id": ids, "text": batch}, schema=schema))
            size += sum(len(text.encode()) for text in batch)
            count += len(batch)
    return size, count


def _batch(documents: Iterator[str], budget: int) -> list[str]:
    batch: list[str] = []
    size = 0
    while len(batch) < BATCH_DOCUMENTS and size < budget:
        text = next(documents)
        batch.append(text)
        size += len(text.encode())
    return batch


def _documents(rng: np.random.Generator) -> Iterator[str]:
    syllables = np.array(_SYLLABLES, dtype=object)
    lexicon = np.array(
        ["".join(rng.choice(syllables, int(n))) for n in rng.integers(1, 5, 30_000)], dtype=object
    )
    pool = np.array([_sentence(rng, lexicon) for _ in range(20_000)], dtype=object)
    while True:
        lengths = rng.integers(3, 61, 1024)
        picks = rng.integers(0, pool.size, int(lengths.sum()))
        start = 0
        for length in lengths:
            yield " ".join(pool[picks[start : start + length]])
            start += int(length)


def _sentence(rng: np.random.Generator, lexicon: np.ndarray) -> str:
    ranks = np.minimum(rng.zipf(1.2, int(rng.integers(4, 25))) - 1, lexicon.size - 1)
    words = [str(w) for w in lexicon[ranks]]
    if rng.random() < 0.2:
        words.insert(int(rng.integers(0, len(words))), str(int(rng.integers(0, 100_000))))
    if rng.random() < 0.3:
        words[int(rng.integers(0, len(words)))] += ","
    return " ".join(words).capitalize() + str(rng.choice([".", ".", ".", "?", "!"]))
