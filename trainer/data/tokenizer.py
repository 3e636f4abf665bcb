"""Tokenizers: byte-level, a byte-level BPE trained on the corpus, or a given ``tokenizers`` file.

A tokenizer is identified in the data manifest by what it *is*, not by a name
(:class:`TokenizerIdentity`): the byte-level one by its kind and vocabulary size, the other two
by the SHA-256 of their Hugging Face ``tokenizer.json``, which is stored next to the shards as a
content-addressed file of the corpus (``<sha256>.bin``, read back through the same
``ShardSource``), so a re-executor or a checkpoint writer gets the exact bytes the run used.

Every document ends with an end-of-text token so a model can tell documents apart: byte 0x00
(NUL, which text files do not contain) for the byte-level tokenizer, ``<|endoftext|>`` for a
trained BPE, the file's own token of that name for a given file.

Every tokenizer, bytes included, also exists as Hugging Face tokenizer files
(:meth:`Tokenizer.hf_files`) that ``transformers.AutoTokenizer.from_pretrained(folder)`` loads
with no extra code and that encode exactly as :meth:`Tokenizer.encode` does. For bytes that is
a BPE over the 256 byte symbols of GPT-2's byte-to-unicode table with no merges, so ids are the
byte values.

Its ``tokenizer_config.json`` names every special token, each one the model has a row for: the
end-of-text token is the EOS and the padding token, and there is no BOS and no unknown token
(byte-level BPE can encode anything). Naming them matters: ``transformers`` loads a checkpoint
folder with the tokenizer class of its ``config.json`` (``Qwen2Tokenizer``), whose defaults
otherwise *add* ``<|endoftext|>`` as a 257th token for EOS, padding and unknown -- an id the
model has no embedding row for, so padded batch generation crashed. For bytes the end-of-text
symbol is "Ā" (U+0100, the NUL byte's symbol), also a letter of real text, so the file sets
``split_special_tokens``: the letter in a text is encoded as its UTF-8 bytes, as
:meth:`Tokenizer.encode` does, never as the end-of-text id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from records.data_manifest import BYTE_END_OF_TEXT, BYTE_VOCAB, TOKENIZER_KINDS, TokenizerIdentity
from trainer.data.shards import ShardSource
from trainer.errors import DataError

END_OF_TEXT_TOKEN = "<|endoftext|>"
"""The end-of-text token of a trained BPE (GPT-2's and Qwen2's name for it)."""

KINDS = TOKENIZER_KINDS


class Tokenizer(Protocol):
    """What the data pipeline, checkpoints and generation need of a tokenizer."""

    vocab_size: int
    end_of_text: int
    exact_in_pieces: bool
    """True when encoding a text cut before a space that sits between two ASCII letters gives
    the tokens of the whole text (how trainer/data/documents.py streams long text files)."""

    @property
    def identity(self) -> TokenizerIdentity:
        """What the manifest records to identify this tokenizer."""
        ...

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (without the end-of-text token)."""
        ...

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """``encode`` of each text, as integer arrays (in parallel where the library can)."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (invalid UTF-8 from a partial sequence becomes U+FFFD)."""
        ...

    def hf_files(self, *, model_max_length: int | None = None) -> dict[str, bytes]:
        """``tokenizer.json`` and ``tokenizer_config.json`` for a Hugging Face model folder."""
        ...


class ByteTokenizer:
    """UTF-8 bytes as tokens: vocabulary 256, nothing to download, nothing to trust."""

    vocab_size = BYTE_VOCAB
    end_of_text = BYTE_END_OF_TEXT
    exact_in_pieces = True  # every byte is its own token, wherever the text is cut

    @property
    def identity(self) -> TokenizerIdentity:
        return TokenizerIdentity(kind="bytes", vocab_size=BYTE_VOCAB, end_of_text=BYTE_END_OF_TEXT)

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [np.frombuffer(text.encode("utf-8"), dtype=np.uint8) for text in texts]

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    def hf_files(self, *, model_max_length: int | None = None) -> dict[str, bytes]:
        return {
            "tokenizer.json": byte_tokenizer_json(),
            "tokenizer_config.json": _tokenizer_config(
                end_of_text=byte_to_unicode()[BYTE_END_OF_TEXT],
                split_special_tokens=True,
                model_max_length=model_max_length,
            ),
        }


class HuggingFaceTokenizer:
    """A ``tokenizer.json`` (given as a file, or trained here), identified by its digest. The
    end-of-text token is looked up by name in the file's vocabulary."""

    def __init__(
        self,
        raw: bytes,
        *,
        kind: str = "huggingface-tokenizers",
        training: Mapping[str, Any] | None = None,
        end_of_text_token: str = END_OF_TEXT_TOKEN,
        where: str = "tokenizer.json",
    ) -> None:
        from tokenizers import Tokenizer as _Tokenizer

        try:
            self._tokenizer = _Tokenizer.from_str(raw.decode("utf-8"))
        except Exception as exc:  # tokenizers raises plain Exception on a malformed file
            raise DataError(
                f"expected a Hugging Face tokenizers JSON in {where}, got: {exc}"
            ) from exc
        self._raw = raw
        token = self._tokenizer.token_to_id(end_of_text_token)
        if token is None:
            raise DataError(
                f"expected the end-of-text token {end_of_text_token!r} in {where}, it is not there"
            )
        self.vocab_size = int(self._tokenizer.get_vocab_size(with_added_tokens=True))
        self.end_of_text = int(token)
        # Only our own trainer's pre-tokenizer is known to split at the pieces' cut points.
        self.exact_in_pieces = kind == "byte-level-bpe"
        self._identity = TokenizerIdentity(
            kind=kind,
            vocab_size=self.vocab_size,
            end_of_text=self.end_of_text,
            sha256=hashlib.sha256(raw).hexdigest(),
            end_of_text_token=end_of_text_token,
            training=training,
        )

    @property
    def identity(self) -> TokenizerIdentity:
        return self._identity

    @property
    def json_bytes(self) -> bytes:
        """The ``tokenizer.json`` bytes the identity's digest is taken over."""
        return self._raw

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        encodings = self._tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int64) for e in encodings]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=False))

    def hf_files(self, *, model_max_length: int | None = None) -> dict[str, bytes]:
        eos = self._identity.end_of_text_token
        assert eos is not None  # every HuggingFaceTokenizer identity names it
        return {
            "tokenizer.json": self._raw,
            # The file's own added tokens are matched in text by ``tokenizers`` itself, which
            # is how encode() works too: nothing to split.
            "tokenizer_config.json": _tokenizer_config(
                end_of_text=eos, split_special_tokens=False, model_max_length=model_max_length
            ),
        }


def tokenizer_from_file(path: Path) -> HuggingFaceTokenizer:
    """A given ``tokenizers`` JSON file (``DataConfig.tokenizer``)."""
    if not path.is_file():
        raise DataError(f"expected a tokenizers JSON file at {path}, found nothing there")
    return HuggingFaceTokenizer(path.read_bytes(), where=str(path))


def corpus_tokenizer(identity: TokenizerIdentity, source: ShardSource) -> Tokenizer:
    """The tokenizer a manifest names, its ``tokenizer.json`` read from the corpus's files and
    checked against the recorded digest, vocabulary size and end-of-text id."""
    if identity.kind == "bytes":
        return ByteTokenizer()
    assert identity.sha256 is not None and identity.end_of_text_token is not None  # __post_init__
    raw = source.read(identity.sha256)
    digest = hashlib.sha256(raw).hexdigest()
    if digest != identity.sha256:
        raise DataError(
            f"expected the corpus's tokenizer.json to have sha256 {identity.sha256}, got {digest}"
        )
    tokenizer = HuggingFaceTokenizer(
        raw,
        kind=identity.kind,
        training=identity.training,
        end_of_text_token=identity.end_of_text_token,
        where=f"tokenizer {identity.sha256[:12]}",
    )
    if tokenizer.identity != identity:
        raise DataError(
            f"expected tokenizer {identity.to_payload()}, "
            f"the file gives {tokenizer.identity.to_payload()}"
        )
    return tokenizer


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table (Radford et al. 2019, openai/gpt-2
    ``encoder.py`` ``bytes_to_unicode``), which the ``tokenizers`` ByteLevel pre-tokenizer and
    decoder use: printable Latin-1 bytes stand for themselves, the other 68 bytes map to
    U+0100 onwards in byte order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table: dict[int, str] = {}
    shifted = 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + shifted)
            shifted += 1
    return table


def byte_tokenizer_json() -> bytes:
    """The byte-level tokenizer as a ``tokenizer.json``: a BPE with the 256 byte symbols as its
    vocabulary (id = byte value) and no merges, behind a ByteLevel pre-tokenizer and decoder."""
    from tokenizers import Tokenizer as _Tokenizer
    from tokenizers import decoders, models, pre_tokenizers

    vocab = {symbol: byte for byte, symbol in byte_to_unicode().items()}
    tokenizer = _Tokenizer(models.BPE(vocab=vocab, merges=[]))
    # No regex split: without merges it could not change a single id, and this keeps the file
    # about bytes only.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    return str(tokenizer.to_str()).encode("utf-8")


def _tokenizer_config(
    *, end_of_text: str, split_special_tokens: bool, model_max_length: int | None
) -> bytes:
    """``tokenizer_config.json``: the fast tokenizer class over ``tokenizer.json``, no added
    BOS/EOS, no clean-up of spaces on decode (so decode(encode(x)) == x), and the special tokens
    (see the module docstring): ``end_of_text`` for EOS and padding, none for BOS and unknown,
    each named explicitly so no tokenizer class fills in a default of its own."""
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
        "eos_token": end_of_text,
        "pad_token": end_of_text,
        "bos_token": None,
        "unk_token": None,
    }
    if split_special_tokens:
        config["split_special_tokens"] = True
    if model_max_length is not None:
        config["model_max_length"] = model_max_length
    return (json.dumps(config, indent=2, sort_keys=True) + "\n").encode("utf-8")
