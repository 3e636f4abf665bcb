"""Build a corpus once: sources -> (a trained tokenizer) -> tokens -> shards + manifest, cached
by what went in.

The cache key is the SHA-256 of the recipe (source digests, the tokenizer's recipe -- bytes, a
given file's digest, or the BPE's vocabulary size, byte budget and library version -- the text
field, shard size, held-out count), so a changed source file builds a new corpus and an
unchanged one is reused. Shards (and a corpus's ``tokenizer.json``) are content-addressed and
shared between corpora in ``<directory>/shards``.

The build streams: sources are read piece by piece (trainer/data/documents.py), encoded in
batches of about a million characters, and cut into shards from a one-shard buffer
(trainer/data/shards.py). Training a BPE reads the pieces once more, before encoding. Peak
memory is set by the tokenizer library, a batch and one shard, not by the corpus (see the data
benchmark in docs/benchmarks.md).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from records.data_manifest import CHUNK_BYTES
from trainer.data.bpe import library_version, train_byte_level_bpe
from trainer.data.config import DataConfig
from trainer.data.documents import Piece, pieces
from trainer.data.manifest import DataManifest, held_out_indices
from trainer.data.shards import (
    DirectoryShardSource,
    ShardSource,
    ShardWriter,
    shard_file_name,
    token_dtype,
    write_content,
)
from trainer.data.sources import (
    STDLIB_LICENSE,
    Source,
    file_digest,
    file_sources,
    python_identity,
    stdlib_sources,
)
from trainer.data.tokenizer import (
    ByteTokenizer,
    HuggingFaceTokenizer,
    Tokenizer,
    corpus_tokenizer,
    tokenizer_from_file,
)
from trainer.errors import DataError

ENCODE_BATCH_CHARACTERS = 1 << 20
"""Characters of text encoded per call (the tokenizer library spreads a batch over its threads)."""


@dataclass(frozen=True)
class PreparedData:
    """A built corpus and where its shards (and tokenizer file) can be read."""

    manifest: DataManifest
    source: ShardSource
    """Any source of the manifest's files (a folder here; downloaded objects on the recorder
    side)."""

    def tokenizer(self) -> Tokenizer:
        """The corpus's tokenizer, its ``tokenizer.json`` (if any) read from ``source`` and
        checked against the manifest (``Tokenizer.hf_files()`` gives its Hugging Face files)."""
        return corpus_tokenizer(self.manifest.tokenizer, self.source)


def prepare_data(config: DataConfig, directory: Path) -> PreparedData:
    """The corpus of ``config``, built under ``directory`` unless an identical one is there."""
    sources, corpus = _choose_sources(config)
    recipe = {
        "sources": [s.record().to_payload() for s in sources],
        "tokenizer": _tokenizer_recipe(config),
        "text_field": config.text_field,
        "shard_tokens": config.shard_tokens,
        "eval_shards": config.eval_shards,
        "chunk_bytes": CHUNK_BYTES,
    }
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()
    shard_dir = directory / "shards"
    manifest_path = directory / "corpora" / f"{key}.json"
    if manifest_path.is_file():
        manifest = DataManifest.from_payload(
            json.loads(manifest_path.read_text()), where=str(manifest_path)
        )
        if all((shard_dir / shard_file_name(d)).is_file() for d in manifest.object_digests):
            return PreparedData(manifest, DirectoryShardSource(shard_dir))
    tokenizer = _tokenizer(config, sources, shard_dir)
    manifest = _build(sources, corpus, tokenizer, config, shard_dir)
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    temporary = manifest_path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(manifest.to_payload(), indent=1))
    temporary.replace(manifest_path)
    return PreparedData(manifest, DirectoryShardSource(shard_dir))


def _choose_sources(config: DataConfig) -> tuple[list[Source], dict[str, Any]]:
    if config.paths:
        paths = [Path(p).expanduser() for p in config.paths]
        return file_sources(paths, license=config.license), {
            "kind": "files",
            "text_field": config.text_field,
        }
    corpus: dict[str, Any] = {
        "kind": "python-stdlib",
        "python": python_identity(),
        "license": STDLIB_LICENSE,
        "selection": (
            "top-level *.py of the stdlib folder, sorted by name, "
            f"while the total stays <= {config.stdlib_max_bytes} bytes"
        ),
    }
    return stdlib_sources(config.stdlib_max_bytes), corpus


def _tokenizer_recipe(config: DataConfig) -> dict[str, Any]:
    """What decides the tokenizer, known before anything is built."""
    if config.tokenizer is not None:
        return {
            "kind": "huggingface-tokenizers",
            "sha256": file_digest(Path(config.tokenizer).expanduser())[0],
        }
    if config.tokenizer_vocab_size is not None:
        return {
            "kind": "byte-level-bpe",
            "vocab_size": config.tokenizer_vocab_size,
            "max_bytes": config.tokenizer_train_bytes,
            "library": library_version(),
        }
    return ByteTokenizer().identity.to_payload()


def _tokenizer(config: DataConfig, sources: Sequence[Source], shard_dir: Path) -> Tokenizer:
    """The corpus's tokenizer, its ``tokenizer.json`` stored with the shards."""
    if config.tokenizer is not None:
        given = tokenizer_from_file(Path(config.tokenizer).expanduser())
        write_content(given.json_bytes, _mkdir(shard_dir))
        return given
    if config.tokenizer_vocab_size is None:
        return ByteTokenizer()
    texts = (piece.text for piece in _pieces(sources, config, cut_text=True))
    trained = train_byte_level_bpe(
        texts, vocab_size=config.tokenizer_vocab_size, max_bytes=config.tokenizer_train_bytes
    )
    write_content(trained.tokenizer_json, _mkdir(shard_dir))
    return HuggingFaceTokenizer(
        trained.tokenizer_json, kind="byte-level-bpe", training=trained.training
    )


def _build(
    sources: list[Source],
    corpus: dict[str, Any],
    tokenizer: Tokenizer,
    config: DataConfig,
    shard_dir: Path,
) -> DataManifest:
    dtype = token_dtype(tokenizer.vocab_size)
    writer = ShardWriter(shard_tokens=config.shard_tokens, dtype=dtype, directory=shard_dir)
    for tokens in _token_stream(
        _pieces(sources, config, cut_text=tokenizer.exact_in_pieces), tokenizer
    ):
        writer.add(tokens)
    shards = writer.shards
    if len(shards) < 2:
        raise DataError(
            "expected a corpus of at least 2 shards of "
            f"{config.shard_tokens} tokens, got {len(shards)}"
            " (add data or lower DataConfig.shard_tokens)"
        )
    return DataManifest(
        corpus=corpus,
        sources=tuple(s.record() for s in sources),
        tokenizer=tokenizer.identity,
        dtype=dtype,
        shard_tokens=config.shard_tokens,
        shards=tuple(shards),
        eval_shards=tuple(held_out_indices(len(shards), config.eval_shards)),
        dropped_tokens=writer.pending_tokens,
        chunk_bytes=CHUNK_BYTES,
    )


def _pieces(sources: Sequence[Source], config: DataConfig, *, cut_text: bool) -> Iterator[Piece]:
    for source in sources:
        yield from pieces(source, text_field=config.text_field, cut_text=cut_text)


def _token_stream(stream: Iterator[Piece], tokenizer: Tokenizer) -> Iterator[np.ndarray]:
    """The token ids of the pieces in order, end-of-text after each document's last piece."""
    end_of_text = np.array([tokenizer.end_of_text], dtype=np.int64)
    batch: list[Piece] = []
    characters = 0
    for piece in stream:
        batch.append(piece)
        characters += len(piece.text)
        if characters >= ENCODE_BATCH_CHARACTERS:
            yield from _encoded(batch, tokenizer, end_of_text)
            batch, characters = [], 0
    yield from _encoded(batch, tokenizer, end_of_text)


def _encoded(
    batch: list[Piece], tokenizer: Tokenizer, end_of_text: np.ndarray
) -> Iterator[np.ndarray]:
    if not batch:
        return
    for piece, tokens in zip(batch, tokenizer.encode_batch([p.text for p in batch]), strict=True):
        yield tokens
        if piece.ends_document:
            yield end_of_text


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
