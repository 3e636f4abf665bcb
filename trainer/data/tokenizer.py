"""Tokenizers: byte-level by default, a Hugging Face ``tokenizers`` JSON file optionally.

A tokenizer is identified in the data manifest by what it *is*, not by a name: the byte-level
one by its kind and vocabulary size, a ``tokenizers`` file by the SHA-256 of its JSON. Every
document ends with an end-of-text token so a model can tell documents apart; for the byte-level
tokenizer that is byte 0x00 (NUL), which text files do not contain.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Protocol

from trainer.errors import DataError

BYTE_VOCAB = 256
BYTE_END_OF_TEXT = 0


class Tokenizer(Protocol):
    vocab_size: int
    end_of_text: int

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (without the end-of-text token)."""
        ...

    def identity(self) -> dict[str, Any]:
        """What the manifest records to identify this tokenizer."""
        ...


class ByteTokenizer:
    """UTF-8 bytes as tokens: vocabulary 256, nothing to download, nothing to trust."""

    vocab_size = BYTE_VOCAB
    end_of_text = BYTE_END_OF_TEXT

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def identity(self) -> dict[str, Any]:
        return {"kind": "bytes", "vocab_size": BYTE_VOCAB, "end_of_text": BYTE_END_OF_TEXT}


class HuggingFaceTokenizer:
    """A ``tokenizers`` JSON file, identified by its digest. Needs the optional ``tokenizers``
    package; the end-of-text token is looked up by name in the file's vocabulary."""

    def __init__(self, path: Path, *, end_of_text: str = "<|endoftext|>") -> None:
        try:
            from tokenizers import Tokenizer as _HFTokenizer  # optional dependency
        except ImportError as exc:
            raise DataError(
                f"expected the 'tokenizers' package to read {path}, it is not installed "
                "(pip install tokenizers, or drop the tokenizer setting to use bytes)"
            ) from exc
        if not path.is_file():
            raise DataError(f"expected a tokenizers JSON file at {path}, found nothing there")
        self._raw = path.read_bytes()
        self._tokenizer = _HFTokenizer.from_str(self._raw.decode("utf-8"))
        self.vocab_size = int(self._tokenizer.get_vocab_size(with_added_tokens=True))
        token = self._tokenizer.token_to_id(end_of_text)
        if token is None:
            raise DataError(f"expected the end-of-text token {end_of_text!r} in {path}, it is not there")
        self.end_of_text = int(token)
        self._end_of_text_name = end_of_text

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def identity(self) -> dict[str, Any]:
        return {
            "kind": "huggingface-tokenizers",
            "sha256": hashlib.sha256(self._raw).hexdigest(),
            "vocab_size": self.vocab_size,
            "end_of_text": self.end_of_text,
            "end_of_text_token": self._end_of_text_name,
        }


def load_tokenizer(path: Path | None) -> Tokenizer:
    """The byte-level tokenizer, or the ``tokenizers`` file at ``path``."""
    return ByteTokenizer() if path is None else HuggingFaceTokenizer(path)
