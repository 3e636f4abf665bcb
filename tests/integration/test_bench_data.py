"""``veritrain bench data`` in a tiny mode: three builds of its synthetic corpus, each in a fresh
process, through the command line. Checks what it reports, not how fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from veritrain.bench.data import DataBenchConfig, run_data_bench

pytestmark = pytest.mark.integration


def test_cli_json_reports_throughput_and_memory_of_every_build(tmp_path: Path) -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "veritrain",
            "bench",
            "data",
            "--json",
            "--size-mb",
            "2",
            "--vocab-size",
            "600",
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    data = json.loads(completed.stdout)
    assert 2_000_000 <= data["corpus_bytes"] < 2_100_000
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


def test_human_report_names_each_build(tmp_path: Path) -> None:
    result = run_data_bench(
        DataBenchConfig(corpus_bytes=1_000_000, vocab_size=400, shard_tokens=4096, workdir=tmp_path)
    )
    lines = result.lines()
    assert lines[0].startswith("data, 1 MB of text in 2 files")
    assert [line.split()[0] for line in lines[2:5]] == ["trained_bpe", "given_tokenizer", "bytes"]
    assert lines[5] == "  given tokenizer gives the trained build's shards: yes"
