"""Build a corpus once: sources -> tokens -> shards + manifest, cached by what went in.

The cache key is the SHA-256 of the recipe (source digests, tokenizer identity, shard size,
held-out count), so a changed source file builds a new corpus and an unchanged one is reused.
Shards are content-addressed and shared between corpora in ``<directory>/shards``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.data.config import DataConfig
from trainer.data.manifest import DataManifest, held_out_indices
from trainer.data.shards import (
    DirectoryShardSource,
    ShardSource,
    shard_file_name,
    token_dtype,
    write_shards,
)
from trainer.data.sources import (
    STDLIB_LICENSE,
    Source,
    documents,
    file_sources,
    python_identity,
    stdlib_sources,
)
from trainer.data.tokenizer import Tokenizer, load_tokenizer
from trainer.errors import DataError


@dataclass(frozen=True)
class PreparedData:
    """A built corpus and where its shards can be read."""

    manifest: DataManifest
    source: ShardSource
    """Any source of the manifest's shards (a folder here; downloaded objects on the recorder side)."""


def prepare_data(config: DataConfig, directory: Path) -> PreparedData:
    """The corpus of ``config``, built under ``directory`` unless an identical one is there."""
    sources, corpus = _choose_sources(config)
    tokenizer = load_tokenizer(Path(config.tokenizer) if config.tokenizer else None)
    recipe = {
        "sources": [s.record().to_payload() for s in sources],
        "tokenizer": tokenizer.identity(),
        "shard_tokens": config.shard_tokens,
        "eval_shards": config.eval_shards,
    }
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()
    shard_dir = directory / "shards"
    manifest_path = directory / "corpora" / f"{key}.json"
    if manifest_path.is_file():
        manifest = DataManifest.from_payload(json.loads(manifest_path.read_text()), where=str(manifest_path))
        if all((shard_dir / shard_file_name(s.sha256)).is_file() for s in manifest.shards):
            return PreparedData(manifest, DirectoryShardSource(shard_dir))
    manifest = _build(sources, corpus, tokenizer, config, shard_dir)
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    temporary = manifest_path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(manifest.to_payload(), indent=1))
    temporary.replace(manifest_path)
    return PreparedData(manifest, DirectoryShardSource(shard_dir))


def _choose_sources(config: DataConfig) -> tuple[list[Source], dict[str, Any]]:
    if config.paths:
        paths = [Path(p).expanduser() for p in config.paths]
        return file_sources(paths, license=config.license), {"kind": "files"}
    corpus: dict[str, Any] = {
        "kind": "python-stdlib",
        "python": python_identity(),
        "license": STDLIB_LICENSE,
        "selection": f"top-level *.py of the stdlib folder, sorted by name, while the total stays <= {config.stdlib_max_bytes} bytes",
    }
    return stdlib_sources(config.stdlib_max_bytes), corpus


def _build(
    sources: list[Source],
    corpus: dict[str, Any],
    tokenizer: Tokenizer,
    config: DataConfig,
    shard_dir: Path,
) -> DataManifest:
    dtype = token_dtype(tokenizer.vocab_size)

    def token_documents() -> Iterator[list[int]]:
        for source in sources:
            for text in documents(source):
                yield [*tokenizer.encode(text), tokenizer.end_of_text]

    shards, dropped = write_shards(
        token_documents(),
        shard_tokens=config.shard_tokens,
        dtype=dtype,
        directory=shard_dir,
    )
    if len(shards) < 2:
        raise DataError(
            f"expected a corpus of at least 2 shards of {config.shard_tokens} tokens, got {len(shards)}"
            " (add data or lower DataConfig.shard_tokens)"
        )
    return DataManifest(
        corpus=corpus,
        sources=tuple(s.record() for s in sources),
        tokenizer=tokenizer.identity(),
        dtype=dtype,
        shard_tokens=config.shard_tokens,
        shards=tuple(shards),
        eval_shards=tuple(held_out_indices(len(shards), config.eval_shards)),
        dropped_tokens=dropped,
    )
