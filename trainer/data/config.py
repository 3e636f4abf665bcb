"""What corpus to train on and how to cut it; part of the run's configuration."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from trainer.errors import ConfigError

MIN_BPE_VOCAB = 258
"""256 byte symbols + the end-of-text token + at least one merge (see trainer/data/bpe.py)."""


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """The corpus recipe. Everything here changes the shards, so all of it is recorded."""

    paths: tuple[str, ...] = ()
    """Local files or folders: text (``.txt .py .md .rst .text``), JSON Lines (``.jsonl``,
    ``.jsonl.gz``) and Parquet (``.parquet``); empty means the Python standard library's sources
    (see trainer/data/sources.py)."""
    license: str = "unknown"
    """SPDX licence of the files in ``paths`` (the stdlib corpus is always PSF-2.0)."""
    stdlib_max_bytes: int = 2_000_000
    """Byte budget of the default stdlib corpus."""
    text_field: str = "text"
    """The JSON field (JSON Lines) or column (Parquet) that holds each document's text."""
    tokenizer: str | None = None
    """A Hugging Face ``tokenizers`` JSON file to use as it is (recorded by its SHA-256).
    None, with ``tokenizer_vocab_size`` None too, means byte-level tokens (vocabulary 256)."""
    tokenizer_vocab_size: int | None = None
    """Train a byte-level BPE of exactly this many tokens (end-of-text included) on the corpus
    when it is built (trainer/data/bpe.py); None: no training. Excludes ``tokenizer``."""
    tokenizer_train_bytes: int = 100_000_000
    """The BPE is trained on the corpus's documents in stream order up to this many bytes of
    UTF-8 text (the whole corpus when it is smaller); the rest is only encoded. 100 MB trains a
    16k vocabulary in 42 s with a 66 MB peak on two shared cores (the data benchmark's corpus,
    docs/benchmarks.md): short next to encoding a large corpus, whose cost is per byte. Word
    counts, the trainer's memory, grow with the distinct words of this prefix."""
    shard_tokens: int = 32_768
    """Tokens per shard; the tail of the stream that does not fill a shard is dropped."""
    eval_shards: int = 2
    """Shards held out for evaluation (evenly spaced through the stream); no cluster trains on
    them."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "paths", tuple(self.paths))
        if self.stdlib_max_bytes < 1024:
            raise ConfigError(
                f"DataConfig.stdlib_max_bytes must be >= 1024, got {self.stdlib_max_bytes}"
            )
        if self.shard_tokens < 2:
            raise ConfigError(f"DataConfig.shard_tokens must be >= 2, got {self.shard_tokens}")
        if self.eval_shards < 1:
            raise ConfigError(f"DataConfig.eval_shards must be >= 1, got {self.eval_shards}")
        if not self.license:
            raise ConfigError("DataConfig.license must be an SPDX identifier or 'unknown', got ''")
        if not self.text_field:
            raise ConfigError(
                "DataConfig.text_field must name a JSON field or Parquet column, got ''"
            )
        if self.tokenizer_vocab_size is not None:
            if self.tokenizer is not None:
                raise ConfigError(
                    "DataConfig.tokenizer_vocab_size must be "
                    "None when DataConfig.tokenizer names a "
                    f"file (use the file, or train a BPE), got {self.tokenizer_vocab_size}"
                )
            if not MIN_BPE_VOCAB <= self.tokenizer_vocab_size <= 2**31:
                raise ConfigError(
                    f"DataConfig.tokenizer_vocab_size must be in [{MIN_BPE_VOCAB}, 2**31], "
                    f"got {self.tokenizer_vocab_size}"
                )
        if self.tokenizer_train_bytes < 1:
            raise ConfigError(
                f"DataConfig.tokenizer_train_bytes must be >= 1, got {self.tokenizer_train_bytes}"
            )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["paths"] = list(self.paths)
        return data
