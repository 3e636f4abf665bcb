"""Corpus formats: text, JSON Lines (plain and gzip), Parquet; the text field; clear errors;
streaming pieces that tokenize like whole documents; the bounded shard writer."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import trainer.data.documents as documents_module
from trainer.config import TrainConfig, with_overrides
from trainer.data.build import prepare_data
from trainer.data.config import DataConfig
from trainer.data.documents import pieces
from trainer.data.shards import ShardWriter, shard_file_name
from trainer.data.sources import file_sources
from trainer.data.tokenizer import ByteTokenizer
from trainer.errors import ConfigError, DataError

TEXTS = [f"Document {i}: naïve café ☃ {'lorem ipsum ' * (i % 7 + 1)}" for i in range(300)]


def write_jsonl(path: Path, records: list[object], *, compressed: bool = False) -> Path:
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    path.write_bytes(gzip.compress(data) if compressed else data)
    return path


def write_parquet(path: Path, columns: dict[str, list[object]], **options: object) -> Path:
    pq.write_table(pa.table(columns), path, **options)  # type: ignore[arg-type]
    return path


def build(tmp_path: Path, *paths: Path, **config: object) -> list[bytes]:
    """The corpus's shard files, in stream order (the whole token stream, minus its tail)."""
    settings: dict[str, object] = {"shard_tokens": 1024, "eval_shards": 1, **config}
    prepared = prepare_data(DataConfig(paths=tuple(map(str, paths)), **settings), tmp_path / "out")  # type: ignore[arg-type]
    return [prepared.source.read(s.sha256) for s in prepared.manifest.shards]


def test_jsonl_gz_parquet_and_jsonl_of_the_same_documents_give_the_same_shards(
    tmp_path: Path,
) -> None:
    plain = write_jsonl(tmp_path / "a.jsonl", [{"text": t, "id": i} for i, t in enumerate(TEXTS)])
    packed = write_jsonl(tmp_path / "b.jsonl.gz", [{"text": t} for t in TEXTS], compressed=True)
    table = write_parquet(
        tmp_path / "c.parquet", {"id": list(range(len(TEXTS))), "text": TEXTS}, row_group_size=64
    )
    expected = build(tmp_path / "1", plain)
    assert build(tmp_path / "2", packed) == expected
    assert build(tmp_path / "3", table) == expected
    stream = b"".join(expected)
    assert stream.startswith(
        b"".join(bytes([b, 0]) for b in TEXTS[0].encode()) + b"\x00\x00"
    )  # uint16 LE, then end-of-text


def test_a_folder_mixes_formats_in_path_order_and_records_every_source(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    write_parquet(folder / "sub" / "b.parquet", {"text": TEXTS[:100]})
    write_jsonl(folder / "a.jsonl.gz", [{"text": t} for t in TEXTS[100:]], compressed=True)
    (folder / "c.md").write_text("# notes\n" * 200)
    (folder / "ignored.csv").write_text("a,b\n")
    prepared = prepare_data(
        DataConfig(paths=(str(folder),), license="CC-BY-4.0", shard_tokens=1024, eval_shards=1),
        tmp_path / "out",
    )
    sources = prepared.manifest.sources
    assert [s.uri for s in sources] == [
        "file:corpus/a.jsonl.gz",
        "file:corpus/c.md",
        "file:corpus/sub/b.parquet",
    ]
    for recorded, path in zip(
        sources, [folder / "a.jsonl.gz", folder / "c.md", folder / "sub" / "b.parquet"], strict=True
    ):
        assert (
            recorded.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        )  # the stored (compressed) bytes
        assert recorded.bytes == path.stat().st_size
        assert recorded.license == "CC-BY-4.0"


def test_text_field_names_the_json_field_and_the_parquet_column(tmp_path: Path) -> None:
    records = write_jsonl(tmp_path / "r.jsonl", [{"body": t, "text": "decoy"} for t in TEXTS])
    table = write_parquet(tmp_path / "r.parquet", {"body": TEXTS, "text": ["decoy"] * len(TEXTS)})
    by_field = build(tmp_path / "1", records, text_field="body", shard_tokens=256)
    assert build(tmp_path / "2", table, text_field="body", shard_tokens=256) == by_field
    decoys = build(tmp_path / "3", records, shard_tokens=256)  # the default field, 'text'
    assert decoys[0] == np.array([*b"decoy", 0] * 43, dtype="<u2")[:256].tobytes()
    assert by_field[0] != decoys[0]


def test_text_field_is_recorded_and_set_from_the_command_line_options() -> None:
    config = with_overrides(TrainConfig(), data_paths=("corpus",), text_field="content")
    assert config.data.text_field == "content" and config.data.paths == ("corpus",)
    assert TrainConfig.from_dict(config.to_dict()).data.text_field == "content"
    assert with_overrides(config, text_field=None).data.text_field == "content"
    with pytest.raises(ConfigError, match=r"DataConfig\.text_field"):
        DataConfig(text_field="")


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            '{"text": "ok"}\n{"body": "x", "id": 3}\n',
            r"expected a 'text' field on line 2 of file:bad\.jsonl, the object has 'body', 'id'",
        ),
        (
            '{"text": "ok"}\n\n{"text": 7}\n',
            r"expected a string in 'text' on line 3 of file:bad\.jsonl, got a number",
        ),
        ('{"text": null}\n', r"expected a string in 'text' on line 1 of file:bad\.jsonl, got null"),
        ('["text"]\n', r"expected a JSON object on line 1 of file:bad\.jsonl, got an array"),
        ('{"text": "ok"}\n{"text": \n', r"expected JSON on line 2 of file:bad\.jsonl"),
    ],
)
def test_a_bad_json_line_is_named_with_its_file_and_line(
    tmp_path: Path, lines: str, message: str
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines)
    with pytest.raises(DataError, match=message):
        build(tmp_path, bad)


def test_a_bad_line_inside_gzip_is_named_too(tmp_path: Path) -> None:
    bad = write_jsonl(
        tmp_path / "bad.jsonl.gz", [{"text": "fine"}] * 5 + [{"text": ["no"]}], compressed=True
    )
    with pytest.raises(
        DataError,
        match=r"expected a string in 'text' on line 6 of file:bad\.jsonl\.gz, got an array",
    ):
        build(tmp_path, bad)


def test_corrupt_and_truncated_gzip_are_named(tmp_path: Path) -> None:
    packed = gzip.compress(b"".join(json.dumps({"text": t}).encode() + b"\n" for t in TEXTS))
    (tmp_path / "not.jsonl.gz").write_bytes(b"this is not gzip at all\n" * 10)
    (tmp_path / "cut.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    with pytest.raises(
        DataError, match=r"expected a readable gzip file at file:not\.jsonl\.gz, got BadGzipFile"
    ):
        build(tmp_path / "1", tmp_path / "not.jsonl.gz")
    with pytest.raises(
        DataError,
        match=(
            r"expected a readable gzip file at file:cut\.jsonl\.gz, "
            r"got EOFError.* after line \d+"
        ),
    ):
        build(tmp_path / "2", tmp_path / "cut.jsonl.gz")


def test_parquet_errors_name_the_file_and_column_or_row(tmp_path: Path) -> None:
    missing = write_parquet(tmp_path / "missing.parquet", {"body": TEXTS})
    numbers = write_parquet(tmp_path / "numbers.parquet", {"text": list(range(10))})
    nulls = write_parquet(
        tmp_path / "nulls.parquet", {"text": [*TEXTS[:70], None, "x"]}, row_group_size=32
    )
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 but nothing of a parquet file " * 40)
    with pytest.raises(
        DataError, match=r"expected a column 'text' in file:missing\.parquet, it has 'body'"
    ):
        build(tmp_path / "1", missing)
    with pytest.raises(
        DataError,
        match=r"expected strings in column 'text' of file:numbers\.parquet, got type int64",
    ):
        build(tmp_path / "2", numbers)
    with pytest.raises(
        DataError,
        match=(
            r"expected a string in column 'text' at row 70 of "
            r"file:nulls\.parquet \(rows count from 0\), got null"
        ),
    ):
        build(tmp_path / "3", nulls)
    with pytest.raises(
        DataError, match=r"expected a readable Parquet file at file:broken\.parquet"
    ):
        build(tmp_path / "4", broken)


def test_a_file_that_changed_after_it_was_hashed_is_refused(tmp_path: Path) -> None:
    for name, text in (("a.jsonl.gz", None), ("b.parquet", None), ("c.txt", "x")):
        path = tmp_path / name
        if name.endswith(".gz"):
            write_jsonl(path, [{"text": t} for t in TEXTS], compressed=True)
        elif name.endswith(".parquet"):
            write_parquet(path, {"text": TEXTS})
        else:
            path.write_text(text * 5000)
        [source] = file_sources([path], license="unknown")
        path.write_bytes(path.read_bytes()[:-1] + b"!")
        with pytest.raises(DataError, match=f"expected file:{name} to have sha256 {source.sha256}"):
            list(pieces(source, text_field="text", cut_text=True))


def test_other_compressed_files_are_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt.gz"
    path.write_bytes(gzip.compress(b"text"))
    with pytest.raises(DataError, match=r"notes\.txt\.gz, got a compressed \.gz file"):
        file_sources([path], license="unknown")


def test_long_text_files_stream_in_pieces_that_tokenize_like_the_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(documents_module, "READ_CHUNK", 4096)  # many pieces from a small file
    text = "".join(
        f"Line {i}: the quick brown fox, jumps; over 12 lazy dogs é.\n\n  indented {i}\r\n"
        for i in range(2000)
    )
    path = tmp_path / "long.txt"
    path.write_bytes(text.encode())
    [source] = file_sources([path], license="unknown")
    cut = list(pieces(source, text_field="text", cut_text=True))
    assert len(cut) > 20
    assert "".join(p.text for p in cut) == text
    assert [p.ends_document for p in cut] == [False] * (len(cut) - 1) + [True]
    assert all(
        p.text.startswith(" ") and p.text[1].isascii() and p.text[1].isalpha() for p in cut[1:]
    )
    assert list(pieces(source, text_field="text", cut_text=False)) == [(text, True)]


def test_invalid_utf8_is_replaced_the_same_way_whole_or_streamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(documents_module, "READ_CHUNK", 7)
    data = ("é☃ abc " * 50).encode() + b"\xff\xfe tail" + "日本".encode()[:-1]
    path = tmp_path / "odd.txt"
    path.write_bytes(data)
    [source] = file_sources([path], license="unknown")
    assert "".join(p.text for p in pieces(source, text_field="text", cut_text=True)) == data.decode(
        "utf-8", errors="replace"
    )


def test_shard_writer_cuts_the_concatenated_stream_with_one_shard_of_memory(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    documents = [rng.integers(0, 60_000, int(n)) for n in rng.integers(0, 300, 200)]
    writer = ShardWriter(shard_tokens=1000, dtype="uint16", directory=tmp_path)
    for document in documents:
        writer.add(document)
    stream = np.concatenate(documents).astype("<u2")
    assert len(writer.shards) == stream.size // 1000 and writer.pending_tokens == stream.size % 1000
    for shard in writer.shards:
        written = (tmp_path / shard_file_name(shard.sha256)).read_bytes()
        assert written == stream[shard.index * 1000 : (shard.index + 1) * 1000].tobytes()
    with pytest.raises(DataError, match="fit uint16"):
        writer.add(np.array([70_000]))


def test_byte_tokens_of_a_streamed_text_file_are_its_bytes(tmp_path: Path) -> None:
    text = "naïve ☃ words and more words " * 3000
    (tmp_path / "t.txt").write_text(text)
    shards = build(tmp_path, tmp_path / "t.txt")
    tokens = np.frombuffer(b"".join(shards), dtype="<u2")
    assert bytes(tokens.astype(np.uint8)) == (text.encode() + b"\x00")[: tokens.size]
    assert ByteTokenizer().decode(list(tokens[:40])) == text.encode()[:40].decode(errors="replace")
