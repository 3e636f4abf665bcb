"""``veritrain bench data`` in a tiny mode: three builds of its synthetic corpus, each in a fresh
process, through the command line. Checks what it reports, not how fast; the human report's
layout is checked on a result put together by hand (the real run's values are checked in its
JSON), so the three builds run once, not twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from unit.veritrain_in_process import run_veritrain

from veritrain.bench.data import MB, BuildMeasurement, DataBenchResult
from veritrain.bench.synthetic_corpus import SyntheticCorpus

pytestmark = pytest.mark.integration


def test_cli_json_reports_throughput_and_memory_of_every_build(tmp_path: Path) -> None:
    completed = run_veritrain(
        [
            "bench",
            "data",
            "--json",
            "--size-mb",
            "1",
            "--vocab-size",
            "600",
            "--workdir",
            str(tmp_path),
        ],
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr
    data = json.loads(completed.stdout)
    assert 1_000_000 <= data["corpus_bytes"] < 1_100_000
    assert data["corpus"]["formats"] == ["jsonl.gz", "parquet"]
    assert set(data["builds"]) == {"trained_bpe", "given_tokenizer", "bytes"}
    for name, build in data["builds"].items():
        assert build["tokens_per_second"] > 0 and build["bytes_per_second"] > 0, name
        assert build["peak_rss_bytes"] > build["baseline_rss_bytes"] > 10 * 2**20, name
        assert build["shards"] >= 2, name
    assert data["tokens_per_second"] == data["builds"]["given_tokenizer"]["tokens_per_second"]
    assert data["peak_rss_bytes"] == max(b["peak_rss_bytes"] for b in data["builds"].values())
    # Byte tokens: one per UTF-8 byte plus one end-of-text per document.
    assert data["builds"]["bytes"]["tokens"] == data["corpus_bytes"] + data["corpus"]["documents"]
    assert data["builds"]["trained_bpe"]["tokens"] < data["corpus_bytes"] / 2  # the BPE compresses
    assert data["tokenizer"]["vocab_size"] == 600 and data["tokenizer"]["library"].startswith(
        "tokenizers=="
    )
    assert data["given_matches_trained"] is True
    assert data["targets"]["peak_rss_under_half_the_corpus"] == {
        "target_bytes": data["corpus_bytes"] // 2,
        "judged": False,
        "met": None,
    }
    assert (tmp_path / "corpus" / "part-0000.jsonl.gz").is_file()


def _result(text_bytes: int, *, given_matches_trained: bool = True) -> DataBenchResult:
    folder = Path("corpus")
    builds = [
        BuildMeasurement(
            name=name,
            seconds=2.0,
            tokens=tokens,
            shards=shards,
            peak_rss_bytes=150 * MB,
            baseline_rss_bytes=110 * MB,
            text_bytes=text_bytes,
        )
        for name, tokens, shards in [
            ("trained_bpe", 400_000, 97),
            ("given_tokenizer", 400_000, 97),
            ("bytes", 1_002_000, 244),
        ]
    ]
    return DataBenchResult(
        corpus=SyntheticCorpus(
            folder=folder,
            files=[folder / "part-0000.jsonl.gz", folder / "part-0001.parquet"],
            text_bytes=text_bytes,
            file_bytes=text_bytes // 2,
            documents=2_000,
        ),
        corpus_seconds=1.0,
        shard_tokens=4096,
        builds=builds,
        tokenizer={"vocab_size": 400, "sha256": "0" * 64},
        given_matches_trained=given_matches_trained,
    )


def test_human_report_names_each_build() -> None:
    lines = _result(1_000_000).lines()
    assert lines[0].startswith("data, 1 MB of text in 2 files")
    assert [line.split()[0] for line in lines[2:5]] == ["trained_bpe", "given_tokenizer", "bytes"]
    assert lines[2].split()[1:4] == ["2.0", "400,000", "200,000"]  # seconds, tokens, tokens/s
    assert lines[5] == "  given tokenizer gives the trained build's shards: yes"
    assert lines[6].endswith("not judged below 256 MiB of text (the interpreter dominates)")
    assert _result(1_000_000, given_matches_trained=False).lines()[5].endswith("shards: NO")
    # From 256 MiB of text the peak (150 MB) is judged against half the corpus.
    assert _result(300 * MB).lines()[6] == "  peak RSS 150 MB < 150 MB (half the corpus): MISSED"
    assert _result(400 * MB).lines()[6] == "  peak RSS 150 MB < 200 MB (half the corpus): met"
