"""Tokenizers: bytes, a BPE trained on the corpus, a given file; their identity in the manifest;
Hugging Face files that transformers loads and that encode exactly like ours."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoTokenizer

import trainer.data.documents as documents_module
from records import RecordError
from records.data_manifest import TokenizerIdentity
from trainer.data.bpe import train_byte_level_bpe
from trainer.data.build import PreparedData, prepare_data
from trainer.data.config import DataConfig
from trainer.data.documents import pieces
from trainer.data.manifest import DataManifest
from trainer.data.shards import DirectoryShardSource, shard_file_name
from trainer.data.sources import file_sources
from trainer.data.tokenizer import (
    ByteTokenizer,
    HuggingFaceTokenizer,
    Tokenizer,
    byte_to_unicode,
    corpus_tokenizer,
)
from trainer.errors import ConfigError, DataError
from trainer.hf_repo import TokenizerExport, as_format_1, repo_json_files
from trainer.model import ModelConfig

SAMPLES = [
    "def mean(xs):\n    return sum(xs) / len(xs)  # arithmetic\n",
    "naïve café, Ünïcödé ☃ 日本語 — “quotes” and emoji 🙂",
    "Āḃc̄: letters with macrons, U+0100 is the NUL byte's symbol",
    "literal <|endoftext|> inside a text",
    "a\x00b  \t\r\n\n   trailing   ",
    "",
]
VOCAB = 600


@pytest.fixture(scope="module")
def bpe_corpus(tmp_path_factory: pytest.TempPathFactory) -> PreparedData:
    """A BPE of 600 tokens trained on a small stdlib corpus."""
    config = DataConfig(
        stdlib_max_bytes=150_000, tokenizer_vocab_size=VOCAB, shard_tokens=2048, eval_shards=1
    )
    return prepare_data(config, tmp_path_factory.mktemp("bpe"))


def loaded_by_transformers(tokenizer: Tokenizer, folder: Path) -> object:
    folder.mkdir()
    for name, data in tokenizer.hf_files(model_max_length=2048).items():
        (folder / name).write_bytes(data)
    return AutoTokenizer.from_pretrained(folder)


@pytest.mark.parametrize("kind", ["bytes", "bpe"])
def test_hf_files_load_in_transformers_and_encode_exactly_like_ours(
    kind: str, bpe_corpus: PreparedData, tmp_path: Path
) -> None:
    ours = ByteTokenizer() if kind == "bytes" else bpe_corpus.tokenizer()
    theirs = loaded_by_transformers(ours, tmp_path / "hf")
    for text in SAMPLES:
        ids = ours.encode(text)
        assert theirs.encode(text, add_special_tokens=False) == ids, text  # type: ignore[attr-defined]
        assert theirs(text)["input_ids"] == ids, text  # type: ignore[operator]  # adds nothing either
        assert ours.decode(ids) == text
        assert theirs.decode(ids) == text  # type: ignore[attr-defined]
    assert theirs.model_max_length == 2048  # type: ignore[attr-defined]
    if kind == "bytes":
        assert ours.encode("é") == [0xC3, 0xA9]
        # The end-of-text id 0 is the NUL byte's symbol; the letter "Ā" in a text (a sample
        # above) is still its two UTF-8 bytes (see the tokenizer module docstring).
        assert (theirs.eos_token, theirs.eos_token_id, theirs.pad_token_id) == ("Ā", 0, 0)  # type: ignore[attr-defined]
        assert len(theirs) == 256  # type: ignore[arg-type]
    else:
        assert theirs.eos_token == "<|endoftext|>" and theirs.eos_token_id == ours.end_of_text == 0  # type: ignore[attr-defined]
        assert len(ours.encode(SAMPLES[0])) < 0.7 * len(
            SAMPLES[0]
        )  # merges learnt from Python code


def test_the_byte_tokenizer_file_maps_each_byte_symbol_to_its_value() -> None:
    document = json.loads(ByteTokenizer().hf_files()["tokenizer.json"])
    table = byte_to_unicode()
    assert document["model"]["vocab"] == {table[b]: b for b in range(256)}
    assert document["model"]["merges"] == [] and document["added_tokens"] == []
    assert (
        ByteTokenizer().hf_files()["tokenizer.json"] == ByteTokenizer().hf_files()["tokenizer.json"]
    )


def test_a_trained_bpe_is_identified_by_digest_and_how_it_was_trained(
    bpe_corpus: PreparedData,
) -> None:
    identity = bpe_corpus.manifest.tokenizer
    raw = bpe_corpus.source.read(identity.sha256 or "")
    assert (
        identity.kind == "byte-level-bpe"
        and identity.vocab_size == VOCAB == bpe_corpus.manifest.vocab_size
    )
    assert identity.end_of_text == 0 and identity.end_of_text_token == "<|endoftext|>"
    assert identity.training is not None
    assert identity.training["library"].startswith("tokenizers==")
    assert identity.training["trained_bytes"] == sum(s.bytes for s in bpe_corpus.manifest.sources)
    assert bpe_corpus.tokenizer().hf_files()["tokenizer.json"] == raw
    assert bpe_corpus.manifest.object_digests[-1] == identity.sha256
    assert bpe_corpus.manifest.dtype == "uint16"
    vocab = json.loads(raw)["model"]["vocab"]
    assert len(vocab) == VOCAB and vocab["<|endoftext|>"] == 0
    assert (
        DataManifest.from_payload(json.loads(json.dumps(bpe_corpus.manifest.to_payload())))
        == bpe_corpus.manifest
    )


def test_a_given_tokenizer_file_gives_the_same_shards_as_the_trained_one(
    bpe_corpus: PreparedData, tmp_path: Path
) -> None:
    given = tmp_path / "tokenizer.json"
    given.write_bytes(bpe_corpus.tokenizer().hf_files()["tokenizer.json"])
    config = DataConfig(
        stdlib_max_bytes=150_000, tokenizer=str(given), shard_tokens=2048, eval_shards=1
    )
    prepared = prepare_data(config, tmp_path / "out")
    assert prepared.manifest.tokenizer.kind == "huggingface-tokenizers"
    assert prepared.manifest.tokenizer.sha256 == bpe_corpus.manifest.tokenizer.sha256
    assert prepared.manifest.tokenizer.training is None
    assert prepared.manifest.shards == bpe_corpus.manifest.shards


def test_training_reads_only_its_byte_budget(tmp_path: Path) -> None:
    text = "alpha beta " * 400 + "zyxwv " * 4000
    small = train_byte_level_bpe([text[:4400], text[4400:]], vocab_size=262, max_bytes=4400)
    full = train_byte_level_bpe([text], vocab_size=262, max_bytes=len(text))
    assert small.training["trained_bytes"] == 4400 and full.training["trained_bytes"] == len(text)
    merges = {
        name: json.loads(run.tokenizer_json)["model"]["merges"]
        for name, run in (("small", small), ("full", full))
    }
    assert not any("z" in "".join(pair) for pair in merges["small"])  # never saw "zyxwv"
    assert any("z" in "".join(pair) for pair in merges["full"])
    cut = train_byte_level_bpe(
        ["ab" * 100, "é" * 100], vocab_size=258, max_bytes=201
    )  # cut inside "é"
    assert cut.training["trained_bytes"] == 200


def test_too_little_text_for_the_vocabulary_is_a_clear_error() -> None:
    with pytest.raises(
        DataError, match=r"expected a BPE vocabulary of 5000 tokens, 11 bytes of text gave only \d+"
    ):
        train_byte_level_bpe(["hello world"], vocab_size=5000, max_bytes=1000)


def test_a_tokenizer_file_and_a_vocabulary_to_train_exclude_each_other() -> None:
    with pytest.raises(
        ConfigError,
        match=r"tokenizer_vocab_size must be None when DataConfig\.tokenizer names a file",
    ):
        DataConfig(tokenizer="t.json", tokenizer_vocab_size=1000)
    with pytest.raises(
        ConfigError, match=r"tokenizer_vocab_size must be in \[258, 2\*\*31\], got 256"
    ):
        DataConfig(tokenizer_vocab_size=256)


def test_a_tampered_or_substituted_tokenizer_file_is_refused(
    bpe_corpus: PreparedData, tmp_path: Path
) -> None:
    identity = bpe_corpus.manifest.tokenizer
    assert identity.sha256 is not None
    raw = bpe_corpus.source.read(identity.sha256)
    (tmp_path / shard_file_name(identity.sha256)).write_bytes(
        raw.replace(b'"<|endoftext|>"', b'"<|endoftexu|>"', 1)
    )
    with pytest.raises(
        DataError, match=f"expected the corpus's tokenizer.json to have sha256 {identity.sha256}"
    ):
        corpus_tokenizer(identity, DirectoryShardSource(tmp_path))
    claimed = TokenizerIdentity.from_payload({**identity.to_payload(), "vocab_size": 700})
    with pytest.raises(DataError, match="the file gives"):
        corpus_tokenizer(claimed, bpe_corpus.source)


def test_identities_round_trip_and_malformed_ones_are_refused() -> None:
    assert (
        TokenizerIdentity.from_payload(ByteTokenizer().identity.to_payload())
        == ByteTokenizer().identity
    )
    assert ByteTokenizer().identity.to_payload() == {
        "kind": "bytes",
        "vocab_size": 256,
        "end_of_text": 0,
    }
    with pytest.raises(RecordError, match="field end_of_text: expected a value, got nothing"):
        TokenizerIdentity.from_payload({"kind": "bytes", "vocab_size": 256})
    with pytest.raises(
        RecordError, match="field sha256: expected a 64-digit lowercase hex SHA-256"
    ):
        TokenizerIdentity.from_payload(
            {
                "kind": "huggingface-tokenizers",
                "vocab_size": 9,
                "end_of_text": 1,
                "sha256": "abc",
                "end_of_text_token": "x",
            }
        )
    with pytest.raises(RecordError, match="field kind: expected one of 'bytes'"):
        TokenizerIdentity.from_payload({"kind": "sentencepiece", "vocab_size": 9, "end_of_text": 1})
    with pytest.raises(RecordError, match="consistent tokenizer identity"):
        TokenizerIdentity.from_payload({"kind": "bytes", "vocab_size": 300, "end_of_text": 0})


def test_a_file_without_the_end_of_text_token_is_refused() -> None:
    raw = ByteTokenizer().hf_files()["tokenizer.json"]
    with pytest.raises(
        DataError, match=re.escape("expected the end-of-text token '<|endoftext|>' in mine.json")
    ):
        HuggingFaceTokenizer(raw, where="mine.json")
    with pytest.raises(DataError, match=r"expected a Hugging Face tokenizers JSON in mine\.json"):
        HuggingFaceTokenizer(b"{not json", where="mine.json")


def test_the_trained_bpe_encodes_streamed_pieces_like_the_whole_text(
    bpe_corpus: PreparedData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokenizer = bpe_corpus.tokenizer()
    assert tokenizer.exact_in_pieces
    monkeypatch.setattr(documents_module, "READ_CHUNK", 1000)
    text = "".join(
        f"It's {i} o'clock;  the cat's\tname is Ünï{i}.\n  class C{i}:\n\tpass\r\n"
        for i in range(400)
    )
    path = tmp_path / "long.txt"
    path.write_text(text)
    [source] = file_sources([path], license="unknown")
    cut = [p.text for p in pieces(source, text_field="text", cut_text=True)]
    assert len(cut) > 10
    assert [t for piece in cut for t in tokenizer.encode(piece)] == tokenizer.encode(text)


@pytest.mark.parametrize("kind", ["bytes", "bpe"])
@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_a_checkpoint_folders_tokenizer_has_only_tokens_the_model_has_rows_for(
    kind: str, family: str, bpe_corpus: PreparedData, tmp_path: Path
) -> None:
    # transformers loads a checkpoint's tokenizer with the class its config.json names
    # (Qwen2Tokenizer, ...), whose defaults added "<|endoftext|>" as id 256 of a 256-row model
    # for EOS, padding and unknown: padded batch generation then indexed past the embedding.
    ours = ByteTokenizer() if kind == "bytes" else bpe_corpus.tokenizer()
    model = ModelConfig(family=family, vocab_size=ours.vocab_size)
    export = TokenizerExport(
        files=ours.hf_files(), eos_token_id=ours.end_of_text, pad_token_id=ours.end_of_text
    )
    for name, document in repo_json_files(model, export).items():
        (tmp_path / name).write_text(json.dumps(document))
    theirs = AutoTokenizer.from_pretrained(tmp_path)
    config = AutoConfig.from_pretrained(tmp_path)
    assert len(theirs) == model.vocab_size
    assert (theirs.eos_token_id, theirs.pad_token_id) == (config.eos_token_id, config.pad_token_id)
    assert theirs.eos_token_id == ours.end_of_text
    assert theirs.bos_token_id is None and theirs.unk_token_id is None
    assert max(theirs.all_special_ids) < model.vocab_size
    batch = theirs(SAMPLES[:3], padding=True, padding_side="left")
    for text, ids, mask in zip(SAMPLES, batch["input_ids"], batch["attention_mask"], strict=False):
        padding = len(mask) - sum(mask)
        assert ids[padding:] == theirs.encode(text)
        assert ids[:padding] == [ours.end_of_text] * padding


def test_format_1_of_the_repo_files_is_what_0313592_wrote() -> None:
    # Recorded checkpoints keep their files: reproduce judges a step recorded in format 1 by
    # as_format_1 of what it re-executes (tests/assets/hf_repo_format1 was written by the code
    # of 0313592, through trainer/api.py's export of that version).
    assets = Path(__file__).resolve().parents[2] / "assets" / "hf_repo_format1"
    raw = (assets / "bpe-tokenizer.json").read_bytes()
    bpe = HuggingFaceTokenizer(
        raw,
        kind="byte-level-bpe",
        training={"algorithm": "byte-level-bpe/gpt2-pretokenizer", "library": "tokenizers"}
        | {"max_bytes": 10_000, "trained_bytes": 10_000},  # the identity only, not the files
    )
    for name, ours, model in (
        ("bytes", ByteTokenizer(), ModelConfig()),
        ("bpe", bpe, ModelConfig(vocab_size=300)),
    ):
        export = TokenizerExport(
            files=ours.hf_files(), eos_token_id=ours.end_of_text, pad_token_id=ours.end_of_text
        )
        documents = repo_json_files(model, export)
        del documents["tokenizer.json"]  # format 1 and 2 share it byte for byte
        recorded = json.loads((assets / f"{name}.json").read_text())
        assert as_format_1(documents) == recorded, name
        assert documents != recorded, name
