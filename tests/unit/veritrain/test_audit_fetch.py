"""Reproduction fetches only what it needs (veritrain/audit/fetch.py): the windows a step read,
by ranges verified against each shard's chunk index, and only the state files its processes
load."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from unit.veritrain.audit_store_source import StoreSource

from records import DataManifest, Shard
from records.data_manifest import CHUNK_BYTES, TokenizerIdentity, chunk_index
from storage import open_store
from storage.checkpoint_files import Manifest
from trainer.checkpoint_layout import TRAINER_STATE, inner_file, model_file, outer_file
from trainer.errors import DataError
from veritrain.audit.fetch import CountingSource, FetchedWindows, download_windows, state_names
from veritrain.errors import CorruptObjectError

TOKENS = 16_384  # 32 KiB of uint16: 8 chunks


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[StoreSource, DataManifest, np.ndarray]:
    store = open_store(f"file://{tmp_path / 'objects'}")
    tokens = (np.arange(2 * TOKENS, dtype=np.uint32) * 7 % 256).astype("<u2")
    shards = []
    for index in range(2):
        data = tokens[index * TOKENS : (index + 1) * TOKENS].tobytes()
        shards.append(
            Shard(
                index=index,
                sha256=store.put_bytes(data),
                tokens=TOKENS,
                chunks=store.put_bytes(chunk_index(data)),
            )
        )
    manifest = DataManifest(
        corpus={"kind": "files"},
        sources=(),
        tokenizer=TokenizerIdentity(kind="bytes", vocab_size=256, end_of_text=0),
        dtype="uint16",
        shard_tokens=TOKENS,
        shards=tuple(shards),
        eval_shards=(1,),
        dropped_tokens=0,
        chunk_bytes=CHUNK_BYTES,
    )
    return StoreSource(store), manifest, tokens


def test_only_the_chunks_holding_the_windows_are_fetched_and_they_read_back(
    corpus: tuple[StoreSource, DataManifest, np.ndarray], tmp_path: Path
) -> None:
    source, manifest, tokens = corpus
    counting = CountingSource(source)
    data = download_windows(
        counting, manifest, {0: {100, 9000}}, window_tokens=65, directory=tmp_path / "data"
    )

    assert counting.ranges == 2  # token 100 is in chunk 0, token 9000 (byte 18,000) in chunk 4
    assert (
        counting.object_bytes == 8 * 32 + 2 * CHUNK_BYTES
    )  # the shard's index and two chunks of 8
    assert isinstance(data.source, FetchedWindows)
    shard = manifest.shards[0]
    np.testing.assert_array_equal(data.source.window(shard, "uint16", 9000, 65), tokens[9000:9065])
    with pytest.raises(DataError, match="chunk 2, which was not fetched"):
        data.source.window(shard, "uint16", 5000, 65)


def test_a_lying_server_cannot_slip_in_other_tokens(
    corpus: tuple[StoreSource, DataManifest, np.ndarray], tmp_path: Path
) -> None:
    source, manifest, _ = corpus
    liar = StoreSource(source.store, flip_ranges=True)
    with pytest.raises(CorruptObjectError, match="chunk 0 of shard 0"):
        download_windows(liar, manifest, {0: {100}}, window_tokens=65, directory=tmp_path / "data")


def test_a_shard_without_a_chunk_index_is_fetched_whole(
    corpus: tuple[StoreSource, DataManifest, np.ndarray], tmp_path: Path
) -> None:
    source, manifest, tokens = corpus
    whole = replace(
        manifest, chunk_bytes=None, shards=tuple(replace(s, chunks=None) for s in manifest.shards)
    )
    counting = CountingSource(source)
    data = download_windows(
        counting, whole, {1: {20}}, window_tokens=65, directory=tmp_path / "data"
    )
    assert (counting.ranges, counting.object_bytes) == (0, 2 * TOKENS)
    assert isinstance(data.source, FetchedWindows)
    np.testing.assert_array_equal(
        data.source.window(whole.shards[1], "uint16", 20, 65), tokens[TOKENS + 20 : TOKENS + 85]
    )


def test_one_cluster_needs_its_own_optimiser_files_and_the_trainer_state_only() -> None:
    names = [TRAINER_STATE, "config.json", "tokenizer.json", "model.safetensors.index.json"]
    names += [model_file(s, 2) for s in range(2)]
    names += [f(c, s) for c in range(3) for s in range(2) for f in (inner_file, outer_file)]
    manifest = Manifest.from_digests({name: f"{i:064x}" for i, name in enumerate(names)})

    one = state_names(manifest, clusters=3, stages=2, cluster=1)
    everything = state_names(manifest, clusters=3, stages=2, cluster=None)

    assert one == sorted(
        [TRAINER_STATE, inner_file(1, 0), inner_file(1, 1), outer_file(1, 0), outer_file(1, 1)]
    )
    assert set(everything) == set(names) - {
        "config.json",
        "tokenizer.json",
        "model.safetensors.index.json",
    }
