"""Reproduction fetches only what it needs, and says how much that was.

What a re-execution of outer step T reads:

* the state before T -- for the whole step every process's files (model shards, each
  cluster's inner and outer optimiser files, ``trainer_state.json``); for ``--cluster J`` only
  cluster J's inner and outer files, ``trainer_state.json`` and, when J's inner files do not
  hold its own local parameters (blocking DiLoCo), the model shards. The Hugging Face repo
  files (config, tokenizer, index, signature) are never needed: the trainer writes its own;
* the token windows the assignment rule gives the clusters it re-runs for T's inner steps
  (trainer/data/assignment.py), plus, for the whole step, the held-out windows cluster 0
  evaluates. A shard with a chunk index (records/data_manifest.py) is fetched by ranges: the
  index object, then only the chunks holding those windows, each checked against the index;
  a shard without one is fetched whole.

:class:`CountingSource` counts every object byte that crosses the wire, so ``reproduce`` can
report what it downloaded against a full fetch and against the run's total.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from records import DataManifest, Shard
from records.data_manifest import TOKEN_BYTES, TokenDtype
from records.outer_step import CheckpointRef
from storage.checkpoint_files import INDEX_FILE, Manifest
from trainer.checkpoint_layout import (
    TRAINER_STATE,
    CheckpointFiles,
    inner_file,
    load_checkpoint_directory,
    outer_file,
)
from trainer.data.assignment import AssignmentRule
from trainer.data.build import PreparedData
from trainer.data.shards import shard_file_name
from trainer.errors import DataError
from veritrain.errors import CorruptObjectError
from veritrain.sources import SMALL_OBJECT_LIMIT, MetricRow, RunSource, read_verified
from veritrain.sources.downloads import download_object, read_checkpoint_manifest

Window = tuple[int, int]
"""(shard index, first token) of a window of ``context + 1`` tokens."""


class CountingSource:
    """A :class:`RunSource` that counts the object bytes it passes on."""

    def __init__(self, inner: RunSource) -> None:
        self.inner = inner
        self.description = inner.description
        self.object_bytes = 0
        self.objects = 0
        self.ranges = 0

    def latest_run_id(self) -> str:
        return self.inner.latest_run_id()

    def entry_bodies(self, run_id: str) -> list[bytes]:
        return self.inner.entry_bodies(run_id)

    def tree_head(self, run_id: str) -> str:
        return self.inner.tree_head(run_id)

    def inclusion_proofs(self, run_id: str, size: int) -> Iterator[list[bytes]]:
        return self.inner.inclusion_proofs(run_id, size)

    def consistency_proof(self, run_id: str, old: int, new: int) -> list[bytes]:
        return self.inner.consistency_proof(run_id, old, new)

    def metrics(self, run_id: str) -> list[MetricRow]:
        return self.inner.metrics(run_id)

    def read_object(self, digest: str, max_size: int = SMALL_OBJECT_LIMIT) -> bytes:
        data = self.inner.read_object(digest, max_size)
        self.objects += 1
        self.object_bytes += len(data)
        return data

    def stream_object(self, digest: str) -> Iterator[bytes]:
        self.objects += 1
        for chunk in self.inner.stream_object(digest):
            self.object_bytes += len(chunk)
            yield chunk

    def object_size(self, digest: str) -> int:
        return self.inner.object_size(digest)

    def read_range(self, digest: str, start: int, end: int) -> bytes:
        data = self.inner.read_range(digest, start, end)
        self.ranges += 1
        self.object_bytes += len(data)
        return data

    def close(self) -> None:
        self.inner.close()


# -- the state -------------------------------------------------------------------------------


def state_names(
    manifest: Manifest, *, clusters: int, stages: int, cluster: int | None
) -> list[str]:
    """The state files a re-execution reads (model shards decided later for ``--cluster``)."""
    names = set(manifest.digests)
    if cluster is not None and inner_file(cluster, 0) not in names:
        # it joined at this step: it starts from a donor's state (trainer/runtime/state.py)
        cluster = None
    wanted = {TRAINER_STATE}
    for c in range(clusters) if cluster is None else (cluster,):
        wanted |= {inner_file(c, s) for s in range(stages)} | {
            outer_file(c, s) for s in range(stages)
        }
    if cluster is None:
        wanted |= {n for n in names if n.startswith("model-") and n.endswith(".safetensors")}
    return sorted(wanted & names)


def download_state(
    source: RunSource,
    checkpoint: CheckpointRef,
    directory: Path,
    *,
    clusters: int,
    stages: int,
    cluster: int | None,
) -> CheckpointFiles:
    """The files of ``state_names``, each verified as it arrives; for ``--cluster`` also the
    model shards when the cluster's inner files hold no local parameters of their own."""
    manifest = read_checkpoint_manifest(source, checkpoint)
    directory.mkdir(parents=True, exist_ok=True)
    names = state_names(manifest, clusters=clusters, stages=stages, cluster=cluster)
    for name in names:
        download_object(source, manifest.digests[name], directory / name)
    files = load_checkpoint_directory(directory)
    if cluster is not None and not _holds_local_parameters(files, cluster, stages):
        for name, digest in manifest.digests.items():
            if name.startswith("model-") and name.endswith(".safetensors") and name != INDEX_FILE:
                download_object(source, digest, directory / name)
        files = load_checkpoint_directory(directory)
    return files


def download_model(
    source: RunSource, checkpoint: CheckpointRef, directory: Path
) -> CheckpointFiles:
    """Only the model shards of a checkpoint (and its trainer state, which a folder needs)."""
    manifest = read_checkpoint_manifest(source, checkpoint)
    directory.mkdir(parents=True, exist_ok=True)
    for name, digest in manifest.digests.items():
        if name == TRAINER_STATE or (name.startswith("model-") and name.endswith(".safetensors")):
            download_object(source, digest, directory / name)
    return load_checkpoint_directory(directory)


def _holds_local_parameters(files: CheckpointFiles, cluster: int, stages: int) -> bool:
    return all(
        any(key.startswith("local.") for key in files.tensor_file(inner_file(cluster, s)))
        for s in range(stages)
    )


# -- the data --------------------------------------------------------------------------------


def windows_read(
    rule: AssignmentRule,
    *,
    clusters: Iterable[int],
    first_inner_step: int,
    inner_steps: int,
    eval_windows: int = 0,
) -> dict[int, set[int]]:
    """Shard index -> first tokens of every window the given clusters train on over the inner
    steps, and of the first ``eval_windows`` held-out windows."""
    wanted: dict[int, set[int]] = {}
    for c in clusters:
        for i in range(first_inner_step, first_inner_step + inner_steps):
            for position in rule.positions(c, i):
                shard, start = rule.train_window(position)
                wanted.setdefault(shard, set()).add(start)
    for j in range(eval_windows):
        shard, start = rule.eval_window(j)
        wanted.setdefault(shard, set()).add(start)
    return wanted


def download_windows(
    source: RunSource,
    manifest: DataManifest,
    windows: Mapping[int, set[int]],
    *,
    window_tokens: int,
    directory: Path,
) -> PreparedData:
    """The windows (verified) and the tokenizer's file, as data a re-execution reads from."""
    directory.mkdir(parents=True, exist_ok=True)
    by_index = {s.index: s for s in manifest.shards}
    token_bytes = TOKEN_BYTES[manifest.dtype]
    for index, starts in sorted(windows.items()):
        shard = by_index[index]
        if shard.chunks is None or manifest.chunk_bytes is None:
            target = directory / shard_file_name(shard.sha256)
            if not target.is_file():
                download_object(source, shard.sha256, target)
            continue
        spans = [(s * token_bytes, (s + window_tokens) * token_bytes) for s in starts]
        _fetch_chunks(
            source, shard, manifest.chunk_bytes, shard.tokens * token_bytes, spans, directory
        )
    if manifest.tokenizer.sha256 is not None:
        target = directory / shard_file_name(manifest.tokenizer.sha256)
        if not target.is_file():
            download_object(source, manifest.tokenizer.sha256, target)
    return PreparedData(
        manifest=manifest,
        source=FetchedWindows(directory=directory, chunk_bytes=manifest.chunk_bytes),
    )


def _fetch_chunks(
    source: RunSource,
    shard: Shard,
    chunk_bytes: int,
    size: int,
    spans: list[tuple[int, int]],
    directory: Path,
) -> None:
    """Fetch the chunks covering ``spans`` (byte ranges) of ``shard``, one Range request per run
    of consecutive chunks, each chunk checked against the shard's chunk index."""
    assert shard.chunks is not None
    index_path = directory / shard_file_name(shard.chunks)
    if not index_path.is_file():
        download_object(source, shard.chunks, index_path)
    index = index_path.read_bytes()
    needed = sorted(
        {
            k
            for start, end in spans
            for k in range(start // chunk_bytes, (end - 1) // chunk_bytes + 1)
        }
    )
    needed = [k for k in needed if not _chunk_path(directory, shard.sha256, k).is_file()]
    for first, last in _runs(needed):
        start, end = first * chunk_bytes, min((last + 1) * chunk_bytes, size)
        data = source.read_range(shard.sha256, start, end)
        for k in range(first, last + 1):
            piece = data[(k - first) * chunk_bytes : (k - first + 1) * chunk_bytes]
            _check_chunk(shard, index, k, piece)
            path = _chunk_path(directory, shard.sha256, k)
            partial = path.with_name(path.name + ".partial")
            partial.write_bytes(piece)
            partial.rename(path)


def _runs(numbers: list[int]) -> list[tuple[int, int]]:
    runs: list[list[int]] = []
    for n in numbers:
        if runs and runs[-1][1] == n - 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return [(a, b) for a, b in runs]


def _chunk_path(directory: Path, sha256: str, k: int) -> Path:
    return directory / f"{sha256}.chunk{k:08d}"


def _check_chunk(shard: Shard, index: bytes, k: int, piece: bytes) -> None:
    expected = index[32 * k : 32 * (k + 1)]
    if len(expected) != 32 or hashlib.sha256(piece).digest() != expected:
        raise CorruptObjectError(
            f"chunk {k} of shard {shard.index} ({shard.sha256[:16]}…) does not hash to its entry "
            "in the shard's chunk index"
        )


@dataclass(frozen=True)
class FetchedWindows:
    """What ``download_windows`` left in a folder, as the trainer reads it (a picklable
    :class:`trainer.data.shards.WindowSource`): whole shards as ``<sha256>.bin``, chunk indices
    under their digests, chunks as ``<shard sha256>.chunk<k>``. Every read is re-verified: a
    whole shard against its digest, a chunk against its (verified) index."""

    directory: Path
    chunk_bytes: int | None
    _verified: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    def read(self, sha256: str) -> bytes:
        path = self.directory / shard_file_name(sha256)
        if not path.is_file():
            raise DataError(f"expected {sha256} among the fetched files, it was not fetched")
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != sha256:
            raise DataError(f"expected the fetched file {path} to hash to {sha256}, it does not")
        return data

    def window(self, info: Shard, dtype: TokenDtype, start: int, length: int) -> np.ndarray:
        size = TOKEN_BYTES[dtype]
        first, end = start * size, (start + length) * size
        if (self.directory / shard_file_name(info.sha256)).is_file():
            data = self._whole(info.sha256)[first:end]
        else:
            data = self._span(info, first, end)
        return np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<"))

    def _whole(self, sha256: str) -> bytes:
        if sha256 not in self._verified:
            self._verified[sha256] = self.read(sha256)
        return self._verified[sha256]

    def _span(self, info: Shard, first: int, end: int) -> bytes:
        if info.chunks is None or self.chunk_bytes is None:
            raise DataError(f"shard {info.index} was neither fetched whole nor has a chunk index")
        index = self._whole(info.chunks)
        pieces = []
        for k in range(first // self.chunk_bytes, (end - 1) // self.chunk_bytes + 1):
            path = _chunk_path(self.directory, info.sha256, k)
            if not path.is_file():
                raise DataError(
                    f"a window of shard {info.index} lies in chunk {k}, which was not fetched"
                )
            piece = path.read_bytes()
            _check_chunk(info, index, k, piece)
            pieces.append(piece)
        offset = (first // self.chunk_bytes) * self.chunk_bytes
        return b"".join(pieces)[first - offset : end - offset]


# -- accounting ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DownloadReport:
    """What a reproduction downloaded, against what a full fetch and the whole run hold."""

    downloaded: int
    """Object bytes fetched for the re-execution and its comparison."""
    objects: int
    ranges: int
    full_fetch: int
    """The whole state before the step plus every shard of the corpus: what ``reproduce``
    fetched before it fetched only what it needs."""
    run_total: int
    """Every checkpoint of the run plus the corpus (sizes as the source reports them)."""
    run_total_estimated: bool = False
    """True when a long run's total was extrapolated from some of its checkpoints."""

    def describe(self) -> str:
        def mb(n: int) -> str:
            return f"{n / 1e6:.2f} MB"

        share = self.downloaded / self.full_fetch if self.full_fetch else 0.0
        of_run = self.downloaded / self.run_total if self.run_total else 0.0
        return (
            f"downloaded {mb(self.downloaded)} ({self.objects} objects, "
            f"{self.ranges} ranged reads): "
            f"{share:.0%} of a full fetch ({mb(self.full_fetch)}: the whole state before the step "
            f"and every shard), {of_run:.1%} of the run's "
            f"{'about ' if self.run_total_estimated else ''}{mb(self.run_total)}"
        )

    def to_json(self) -> dict[str, int | bool]:
        return {
            "downloaded": self.downloaded,
            "objects": self.objects,
            "ranges": self.ranges,
            "full_fetch": self.full_fetch,
            "run_total": self.run_total,
            "run_total_estimated": self.run_total_estimated,
        }


def corpus_bytes(manifest: DataManifest) -> int:
    """The corpus's shard bytes, from the signed token counts."""
    return sum(s.tokens for s in manifest.shards) * TOKEN_BYTES[manifest.dtype]


def checkpoint_bytes(source: RunSource, checkpoint: CheckpointRef) -> int:
    """Every file of a checkpoint, as the source reports their sizes (its manifest included)."""
    manifest = Manifest.from_json(read_verified(source, checkpoint.manifest_object))
    return sum(source.object_size(d) for d in manifest.digests.values()) + source.object_size(
        checkpoint.manifest_object
    )
