"""``veritrain bench data``: how fast the shard builder turns a corpus into tokens, and in how
much memory.

The benchmark writes its own synthetic corpus (synthetic_corpus.py: half gzip-compressed JSON
Lines, half Parquet; about 1 GB of text, 8 MB with ``--quick``) and builds it three times, each
build alone in a fresh process whose peak resident memory (``VmHWM``) is read by
memory_probe.py:

| build | tokenizer | what it measures |
|---|---|---|
| ``trained_bpe`` | a byte-level BPE trained at build time (on the first ``tokenizer_train_bytes``) | training, then encoding the whole corpus |
| ``given_tokenizer`` | that BPE's ``tokenizer.json``, given as a file | encoding alone; must give the same shards |
| ``bytes`` | byte-level | reading, decompressing and sharding, with no BPE |

Throughput is tokens (and UTF-8 text bytes) of the corpus over the build's wall time; memory
is the build process's peak RSS, and its growth over the same process after imports. The
target (DESIGN issue #14): a 1 GB corpus builds with a peak RSS well under 1 GB -- here, under
half the corpus's text bytes, judged only for corpora of 256 MiB or more (below that the
interpreter and its libraries, about 100 MB, dominate).
"""  # noqa: E501

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainer.data.config import DataConfig
from trainer.data.manifest import DataManifest
from trainer.data.shards import shard_file_name
from veritrain.bench.memory_probe import probe
from veritrain.bench.scratch import scratch_dir
from veritrain.bench.synthetic_corpus import SyntheticCorpus, write_corpus
from veritrain.errors import BenchError

MB = 1_000_000
TARGET_FRACTION = 0.5
"""Peak RSS must stay under this fraction of the corpus's text bytes."""
JUDGED_FROM_BYTES = 256 * 2**20


@dataclass(frozen=True, kw_only=True)
class DataBenchConfig:
    corpus_bytes: int = 1_000 * MB
    """UTF-8 text bytes of the synthetic corpus."""
    vocab_size: int = 16_384
    """The trained BPE's vocabulary (the size a 10-30M-parameter CPU preset would use)."""
    tokenizer_train_bytes: int = DataConfig().tokenizer_train_bytes
    shard_tokens: int | None = None
    """Tokens per shard; None: 2**20 (2 MiB of uint16, a realistic size for a large corpus), or
    smaller for a small corpus so that even its BPE tokens fill a few dozen shards."""
    seed: int = 0
    workdir: Path | None = None

    def __post_init__(self) -> None:
        if self.corpus_bytes < MB:
            raise BenchError(f"expected a corpus of at least 1 MB, got {self.corpus_bytes} bytes")

    @property
    def tokens_per_shard(self) -> int:
        if self.shard_tokens is not None:
            return self.shard_tokens
        return min(1 << 20, 1 << ((self.corpus_bytes // 128).bit_length() - 1))


@dataclass(frozen=True, kw_only=True)
class BuildMeasurement:
    """One corpus build in its own process."""

    name: str
    seconds: float
    tokens: int
    """Tokens of the stream (full shards plus the dropped tail)."""
    shards: int
    peak_rss_bytes: int
    baseline_rss_bytes: int
    """Peak RSS of the same process after its imports, before the build."""
    text_bytes: int

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds

    @property
    def bytes_per_second(self) -> float:
        return self.text_bytes / self.seconds

    @property
    def peak_growth_bytes(self) -> int:
        return self.peak_rss_bytes - self.baseline_rss_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in asdict(self).items() if k not in ("name", "text_bytes")},
            "tokens_per_second": self.tokens_per_second,
            "bytes_per_second": self.bytes_per_second,
            "peak_growth_bytes": self.peak_growth_bytes,
        }


@dataclass(frozen=True, kw_only=True)
class DataBenchResult:
    corpus: SyntheticCorpus
    corpus_seconds: float
    shard_tokens: int
    builds: list[BuildMeasurement]
    tokenizer: dict[str, Any]
    given_matches_trained: bool
    """The given-tokenizer build produced exactly the trained build's shards."""

    def build(self, name: str) -> BuildMeasurement:
        return next(b for b in self.builds if b.name == name)

    @property
    def peak_rss_bytes(self) -> int:
        return max(b.peak_rss_bytes for b in self.builds)

    @property
    def target_judged(self) -> bool:
        return self.corpus.text_bytes >= JUDGED_FROM_BYTES

    @property
    def target_met(self) -> bool:
        return self.peak_rss_bytes < TARGET_FRACTION * self.corpus.text_bytes

    def to_dict(self) -> dict[str, Any]:
        given = self.build("given_tokenizer")
        return {
            "corpus_bytes": self.corpus.text_bytes,
            "corpus": {
                **self.corpus.to_dict(),
                "formats": sorted({p.name.split(".", 1)[1] for p in self.corpus.files}),
                "seconds_to_write": self.corpus_seconds,
            },
            "tokens_per_second": given.tokens_per_second,
            "bytes_per_second": given.bytes_per_second,
            "peak_rss_bytes": self.peak_rss_bytes,
            "shard_tokens": self.shard_tokens,
            "builds": {b.name: b.to_dict() for b in self.builds},
            "tokenizer": self.tokenizer,
            "given_matches_trained": self.given_matches_trained,
            "targets": {
                "peak_rss_under_half_the_corpus": {
                    "target_bytes": int(TARGET_FRACTION * self.corpus.text_bytes),
                    "judged": self.target_judged,
                    "met": self.target_met if self.target_judged else None,
                }
            },
        }

    def lines(self) -> list[str]:
        out = [
            f"data, {self.corpus.text_bytes / MB:,.0f} MB "
            f"of text in {len(self.corpus.files)} files "
            f"({self.corpus.file_bytes / MB:,.0f} MB on "
            f"disk, {self.corpus.documents:,} documents); "
            f"BPE vocabulary {self.tokenizer['vocab_size']:,}",
            f"  {'build':16} {'seconds':>8} {'tokens':>13} {'tokens/s':>10} "
            f"{'MB/s':>6} {'peak RSS MB':>12} {'growth MB':>10}",
        ]
        for b in self.builds:
            out.append(
                f"  {b.name:16} {b.seconds:8.1f} {b.tokens:13,} {b.tokens_per_second:10,.0f} "
                f"{b.bytes_per_second / MB:6.2f} {b.peak_rss_bytes / MB:12.0f} "
                f"{b.peak_growth_bytes / MB:10.0f}"
            )
        out.append(
            "  given tokenizer gives the trained build's shards: "
            f"{'yes' if self.given_matches_trained else 'NO'}"
        )
        target = TARGET_FRACTION * self.corpus.text_bytes / MB
        if self.target_judged:
            out.append(
                f"  peak RSS {self.peak_rss_bytes / MB:,.0f} "
                f"MB < {target:,.0f} MB (half the corpus): "
                f"{'met' if self.target_met else 'MISSED'}"
            )
        else:
            out.append(
                "  peak RSS target: not judged below 256 MiB of text (the interpreter dominates)"
            )
        return out


def run_data_bench(
    config: DataBenchConfig, *, say: Callable[[str], None] = lambda _: None
) -> DataBenchResult:
    with scratch_dir(config.workdir, prefix="veritrain-bench-data-") as workdir:
        say(f"writing a synthetic corpus of {config.corpus_bytes / MB:,.0f} MB of text")
        started = time.perf_counter()
        corpus = write_corpus(workdir / "corpus", text_bytes=config.corpus_bytes, seed=config.seed)
        corpus_seconds = time.perf_counter() - started
        common = {
            "paths": [str(corpus.folder)],
            "license": "CC0-1.0",
            "shard_tokens": config.tokens_per_shard,
            "eval_shards": 1,
        }
        say(f"building with a BPE of {config.vocab_size:,} tokens trained at build time")
        trained, trained_manifest = _build(
            "trained_bpe",
            workdir,
            corpus,
            {
                **common,
                "tokenizer_vocab_size": config.vocab_size,
                "tokenizer_train_bytes": config.tokenizer_train_bytes,
            },
        )
        identity = trained_manifest.tokenizer
        assert identity.sha256 is not None  # a trained BPE has a tokenizer.json
        given_file = workdir / "tokenizer.json"
        given_file.write_bytes(
            (workdir / "trained_bpe" / "shards" / shard_file_name(identity.sha256)).read_bytes()
        )
        say("building with that tokenizer given as a file")
        given, given_manifest = _build(
            "given_tokenizer", workdir, corpus, {**common, "tokenizer": str(given_file)}
        )
        say("building with byte-level tokens")
        byte_level, _ = _build("bytes", workdir, corpus, common)
    return DataBenchResult(
        corpus=corpus,
        corpus_seconds=corpus_seconds,
        shard_tokens=config.tokens_per_shard,
        builds=[trained, given, byte_level],
        tokenizer={
            "vocab_size": identity.vocab_size,
            "sha256": identity.sha256,
            **dict(identity.training or {}),
        },
        given_matches_trained=list(given_manifest.shards) == list(trained_manifest.shards),
    )


def _build(
    name: str, workdir: Path, corpus: SyntheticCorpus, settings: dict[str, Any]
) -> tuple[BuildMeasurement, DataManifest]:
    config_path = workdir / f"{name}.config.json"
    config_path.write_text(json.dumps(settings))
    result_path = workdir / f"{name}.manifest.json"
    measured = probe("data-build", str(config_path), str(workdir / name), str(result_path))
    manifest = DataManifest.from_payload(
        json.loads(result_path.read_text()), where=str(result_path)
    )
    measurement = BuildMeasurement(
        name=name,
        seconds=measured.seconds,
        tokens=sum(s.tokens for s in manifest.shards) + manifest.dropped_tokens,
        shards=len(manifest.shards),
        peak_rss_bytes=measured.peak_kib * 1024,
        baseline_rss_bytes=measured.baseline_kib * 1024,
        text_bytes=corpus.text_bytes,
    )
    return measurement, manifest
