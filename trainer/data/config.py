"""What corpus to train on and how to cut it; part of the run's configuration."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from trainer.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """The corpus recipe. Everything here changes the shards, so all of it is recorded."""

    paths: tuple[str, ...] = ()
    """Local text / ``.jsonl`` files or folders; empty means the Python standard library's
    sources (see trainer/data/sources.py)."""
    license: str = "unknown"
    """SPDX licence of the files in ``paths`` (the stdlib corpus is always PSF-2.0)."""
    stdlib_max_bytes: int = 2_000_000
    """Byte budget of the default stdlib corpus."""
    tokenizer: str | None = None
    """A Hugging Face ``tokenizers`` JSON file; None means byte-level tokens."""
    shard_tokens: int = 32_768
    """Tokens per shard; the tail of the stream that does not fill a shard is dropped."""
    eval_shards: int = 2
    """Shards held out for evaluation (evenly spaced through the stream); no cluster trains on them."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "paths", tuple(self.paths))
        if self.stdlib_max_bytes < 1024:
            raise ConfigError(f"DataConfig.stdlib_max_bytes must be >= 1024, got {self.stdlib_max_bytes}")
        if self.shard_tokens < 2:
            raise ConfigError(f"DataConfig.shard_tokens must be >= 2, got {self.shard_tokens}")
        if self.eval_shards < 1:
            raise ConfigError(f"DataConfig.eval_shards must be >= 1, got {self.eval_shards}")
        if not self.license:
            raise ConfigError("DataConfig.license must be an SPDX identifier or 'unknown', got ''")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["paths"] = list(self.paths)
        return data
