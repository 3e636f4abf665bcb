"""Real corpora end to end: a corpus of a JSON Lines (gzip) file and a Parquet file, tokenized by
a BPE trained at build time on both -- identically in separate processes -- and trained on by
the real multi-process trainer; and the builder's memory does not grow with the corpus.

One corpus holds both formats, so one build pair and one training run cover both readers (the
test ran once per format before, twice the trainer's start-up for no more coverage); that both
are read in full is checked by the byte-level build below, whose token count is the text's
byte count, which a reader that dropped or cut one file would miss by half."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainer.api import train
from trainer.config import TrainConfig
from trainer.data.config import DataConfig
from trainer.data.manifest import DataManifest
from trainer.data.shards import shard_file_name
from trainer.presets import run_preset
from veritrain.bench.memory_probe import Measurement, probe
from veritrain.bench.synthetic_corpus import FORMATS, write_corpus
from veritrain.record.local_recorder import LocalDirectoryRecorder, read_records

VOCAB = 512
MiB = 2**20


def build_in_child(
    data: DataConfig, directory: Path, env: dict[str, str]
) -> tuple[DataManifest, Measurement]:
    """Build the corpus in a fresh interpreter (memory_probe's ``data-build``)."""
    directory.mkdir(parents=True)
    config_path, result_path = directory / "config.json", directory / "manifest.json"
    config_path.write_text(json.dumps(data.to_dict()))
    measured = probe(
        "data-build", str(config_path), str(directory / "corpus"), str(result_path), env=env
    )
    return DataManifest.from_payload(json.loads(result_path.read_text())), measured


def small_run(data: DataConfig) -> TrainConfig:
    tiny = run_preset("tiny")
    return replace(
        tiny,
        run_id="corpus-e2e",
        model=replace(tiny.model, vocab_size=VOCAB),
        data=data,
        clusters=2,
        stages=1,
        outer_steps=2,
        inner_steps=6,
        micro_batches=1,
        eval_batches=2,
        inner=replace(tiny.inner, warmup_steps=0),
    )


def test_a_corpus_of_both_formats_trains_end_to_end_with_a_bpe_that_builds_identically_twice(
    tmp_path: Path,
) -> None:
    corpus = write_corpus(tmp_path / "corpus", text_bytes=600_000, formats=FORMATS)
    data = DataConfig(
        paths=(str(corpus.folder),),
        license="CC0-1.0",
        tokenizer_vocab_size=VOCAB,
        shard_tokens=4096,
        eval_shards=1,
    )
    # 1. Two builds in separate processes with different thread counts and hash seeds.
    first, _ = build_in_child(
        data, tmp_path / "a", {"RAYON_NUM_THREADS": "1", "PYTHONHASHSEED": "1"}
    )
    second, _ = build_in_child(
        data,
        tmp_path / "b",
        {"RAYON_NUM_THREADS": "2", "PYTHONHASHSEED": "2", "TOKENIZERS_PARALLELISM": "true"},
    )
    identity = first.tokenizer
    assert identity.kind == "byte-level-bpe" and first.vocab_size == VOCAB
    assert identity.sha256 is not None
    name = shard_file_name(identity.sha256)
    tokenizer_json = (tmp_path / "a" / "corpus" / "shards" / name).read_bytes()
    assert (tmp_path / "b" / "corpus" / "shards" / name).read_bytes() == tokenizer_json
    assert [s.sha256 for s in second.shards] == [s.sha256 for s in first.shards]
    assert second.digest() == first.digest()
    assert [s.uri for s in first.sources] == [
        "file:corpus/part-0000.jsonl.gz",
        "file:corpus/part-0001.parquet",
    ]

    # 2. The trainer reuses that build and trains on it (2 clusters, real processes).
    config = small_run(data)
    out = tmp_path / "run"
    summary = train(
        config, LocalDirectoryRecorder.factory(out), data_dir=tmp_path / "a" / "corpus", quiet=True
    )
    assert summary is not None and summary.steps == 2
    recorded: dict[str, Any] = json.loads((out / "data-manifest.json").read_text())
    assert DataManifest.from_payload(recorded).tokenizer == first.tokenizer
    assert [s["sha256"] for s in recorded["shards"]] == [s.sha256 for s in first.shards]
    losses = [r["metrics"]["eval_loss"] for r in read_records(out)]
    # It learns from BPE tokens: well below the uniform guess over the vocabulary, ln 512 = 6.24.
    assert len(losses) == 2 and max(losses) < math.log(VOCAB) - 0.5, losses


def test_the_builder_does_not_hold_the_corpus(tmp_path: Path) -> None:
    """Peak memory of a build in a fresh process, over the same process after its imports, at two
    corpus sizes: ten times the text must not add more than a few MiB."""
    growth: dict[int, int] = {}
    for size in (5_000_000, 50_000_000):
        corpus = write_corpus(
            tmp_path / f"corpus-{size}", text_bytes=size
        )  # half JSONL.gz, half Parquet
        data = DataConfig(paths=(str(corpus.folder),), shard_tokens=1 << 20, eval_shards=1)
        manifest, measured = build_in_child(data, tmp_path / f"build-{size}", {})
        assert (
            sum(s.tokens for s in manifest.shards) + manifest.dropped_tokens > size
        )  # bytes + end-of-text
        growth[size] = measured.growth_kib * 1024
    added_text = 45_000_000
    # Holding the text would add 45 MB, holding its tokens 90 MB (uint16); one shard is 2 MiB.
    assert growth[50_000_000] - growth[5_000_000] < added_text / 4, growth
