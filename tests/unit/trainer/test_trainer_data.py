"""The data pipeline: a reproducible corpus, auditable shards, the assignment rule, batches."""

from __future__ import annotations

import hashlib
import json
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from trainer.data.assignment import AssignmentRule
from trainer.data.build import prepare_data
from trainer.data.config import DataConfig
from trainer.data.manifest import DataManifest, held_out_indices
from trainer.data.reader import BatchReader
from trainer.data.shards import DirectoryShardSource, shard_file_name
from trainer.errors import DataError

SMALL = DataConfig(stdlib_max_bytes=200_000, shard_tokens=4096, eval_shards=2)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[DataManifest, DirectoryShardSource]:
    prepared = prepare_data(SMALL, tmp_path_factory.mktemp("data"))
    assert isinstance(prepared.source, DirectoryShardSource)
    return prepared.manifest, prepared.source


def rule_for(
    manifest: DataManifest, *, clusters: int = 2, batch: int = 4, seed: int = 0
) -> AssignmentRule:
    return AssignmentRule(
        context=32,
        sequences_per_step=batch,
        clusters=clusters,
        seed=seed,
        shard_tokens=manifest.shard_tokens,
        train_shards=manifest.train_shards,
        eval_shards=tuple(manifest.eval_shards),
    )


def test_stdlib_corpus_is_identical_when_built_twice(
    corpus: tuple[DataManifest, DirectoryShardSource], tmp_path: Path
) -> None:
    again = prepare_data(SMALL, tmp_path).manifest
    assert again.to_payload() == corpus[0].to_payload()
    assert again.corpus["kind"] == "python-stdlib"
    assert again.corpus["python"]["version"].count(".") == 2
    assert all(s.license == "PSF-2.0" and s.uri.startswith("python-stdlib:") for s in again.sources)


def test_sources_are_a_sorted_prefix_within_the_byte_budget(
    corpus: tuple[DataManifest, DirectoryShardSource],
) -> None:
    manifest, _ = corpus
    names = [s.uri.rsplit("/", 1)[1] for s in manifest.sources]
    assert names == sorted(names)
    assert sum(s.bytes for s in manifest.sources) <= SMALL.stdlib_max_bytes


def test_a_shard_can_be_hashed_and_read_without_our_code(
    corpus: tuple[DataManifest, DirectoryShardSource],
) -> None:
    manifest, source = corpus
    shard = manifest.shards[0]
    path = source.directory / shard_file_name(shard.sha256)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == shard.sha256
    tokens = np.fromfile(path, dtype="<u2")  # headerless little-endian uint16
    assert tokens.size == manifest.shard_tokens
    first_file = Path(sysconfig.get_paths()["stdlib"]) / manifest.sources[0].uri.rsplit("/", 1)[1]
    assert bytes(tokens[:200].astype(np.uint8)) == first_file.read_bytes()[:200]


def test_manifest_round_trips_through_json(
    corpus: tuple[DataManifest, DirectoryShardSource],
) -> None:
    manifest = corpus[0].with_assignment(rule_for(corpus[0]).to_dict())
    data = json.loads(json.dumps(manifest.to_payload()))
    assert DataManifest.from_payload(data) == manifest
    assert data["assignment"]["rule"].startswith("veritrain.")
    assert {s["split"] for s in data["shards"]} == {"train", "eval"}


def test_training_never_reads_a_held_out_shard(
    corpus: tuple[DataManifest, DirectoryShardSource],
) -> None:
    manifest = corpus[0]
    rule = rule_for(manifest)
    held_out = set(manifest.eval_shards)
    read = {rule.train_window(p)[0] for p in range(3 * rule.train_windows)}
    assert read == set(manifest.train_shards)
    assert not read & held_out


def test_each_epoch_is_a_permutation_of_all_windows(
    corpus: tuple[DataManifest, DirectoryShardSource],
) -> None:
    rule = rule_for(corpus[0])
    n = rule.train_windows
    for epoch in range(2):
        windows = {rule.train_window(epoch * n + q) for q in range(n)}
        assert len(windows) == n
    first_epoch = [rule.train_window(q) for q in range(10)]
    second_epoch = [rule.train_window(n + q) for q in range(10)]
    assert first_epoch != second_epoch  # reshuffled, not replayed


def test_clusters_get_disjoint_consecutive_positions(
    corpus: tuple[DataManifest, DirectoryShardSource],
) -> None:
    rule = rule_for(corpus[0], clusters=3, batch=4)
    assert rule.positions(0, 0) == range(0, 4)
    assert rule.positions(2, 0) == range(8, 12)
    assert rule.positions(0, 1) == range(12, 16)


def test_batches_shift_targets_by_one_token(
    corpus: tuple[DataManifest, DirectoryShardSource],
) -> None:
    manifest, source = corpus
    reader = BatchReader(manifest, rule_for(manifest), source)
    inputs, targets = reader.train_batch(1, 5)
    assert inputs.shape == targets.shape == (4, 32)
    assert np.array_equal(inputs[:, 1:].numpy(), targets[:, :-1].numpy())
    again, _ = BatchReader(manifest, rule_for(manifest), source).train_batch(1, 5)
    assert np.array_equal(inputs.numpy(), again.numpy())
    other, _ = reader.train_batch(0, 5)
    assert not np.array_equal(inputs.numpy(), other.numpy())


def test_eval_batches_are_fixed_and_bounded(
    corpus: tuple[DataManifest, DirectoryShardSource],
) -> None:
    manifest, source = corpus
    reader = BatchReader(manifest, rule_for(manifest), source)
    first = reader.eval_batches(2)
    assert all(
        np.array_equal(a[0].numpy(), b[0].numpy())
        for a, b in zip(first, reader.eval_batches(2), strict=True)
    )
    with pytest.raises(DataError, match="evaluation batches"):
        reader.eval_batches(10_000)


def test_a_tampered_shard_is_refused(
    corpus: tuple[DataManifest, DirectoryShardSource], tmp_path: Path
) -> None:
    manifest, source = corpus
    for info in manifest.shards:
        name = shard_file_name(info.sha256)
        (tmp_path / name).write_bytes((source.directory / name).read_bytes())
    shard = manifest.shards[manifest.train_shards[0]]
    forged = bytearray((tmp_path / shard_file_name(shard.sha256)).read_bytes())
    forged[0] ^= 1
    (tmp_path / shard_file_name(shard.sha256)).write_bytes(bytes(forged))
    reader = BatchReader(manifest, rule_for(manifest), DirectoryShardSource(tmp_path))
    with pytest.raises(DataError, match=f"sha256 {shard.sha256}"):
        for step in range(100):
            reader.train_batch(0, step)


def test_jsonl_and_text_files_become_documents(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.jsonl").write_text(
        "\n".join(json.dumps({"text": f"record {i} " * 40}) for i in range(60))
    )
    (folder / "b.txt").write_text("plain text " * 400)
    prepared = prepare_data(
        DataConfig(paths=(str(folder),), license="CC0-1.0", shard_tokens=1024, eval_shards=1),
        tmp_path / "out",
    )
    manifest = prepared.manifest
    assert [s.uri for s in manifest.sources] == ["file:corpus/a.jsonl", "file:corpus/b.txt"]
    assert {s.license for s in manifest.sources} == {"CC0-1.0"}
    assert manifest.corpus == {"kind": "files", "text_field": "text"}


def test_malformed_jsonl_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"no_text": 1}\n')
    with pytest.raises(DataError, match=r"line 2 of file:bad\.jsonl"):
        prepare_data(DataConfig(paths=(str(bad),), shard_tokens=4), tmp_path / "out")


def test_held_out_shards_are_spread_through_the_stream() -> None:
    assert held_out_indices(10, 2) == [2, 7]
    with pytest.raises(DataError, match="fewer held-out shards"):
        held_out_indices(2, 2)
