"""Train a byte-level BPE tokenizer on the corpus, deterministically, when the corpus is built.

**The model.** GPT-2's byte-level BPE (Radford et al. 2019; Sennrich et al. 2016 for BPE):
text is split by GPT-2's pre-tokenizer regex (contractions, letter runs, digit runs,
punctuation runs and whitespace, each with at most one leading space), every UTF-8 byte of a
piece is one of 256 base symbols, and merges learnt from pair counts join symbols inside a
piece, never across pieces. The vocabulary is ``<|endoftext|>`` (id 0, the end-of-text token),
the 256 byte symbols (ids 1-256, ordered by the code point of their GPT-2 byte-to-unicode
character) and then one token per merge, in merge order, up to
``DataConfig.tokenizer_vocab_size`` tokens; no normaliser, no unknown token, no dropout, so
``decode(encode(x)) == x`` for every string. The trainer is Hugging Face ``tokenizers``'
``BpeTrainer`` (pinned in pyproject.toml); the result is its ``tokenizer.json``.

**What it is trained on.** The corpus's documents in stream order (the order the shards are
cut from), up to ``DataConfig.tokenizer_train_bytes`` bytes of UTF-8 text: pieces are taken
whole while the total stays within the budget, the piece that crosses it is cut to the
remaining bytes (at a character boundary), and nothing after it is read. This *includes the
held-out text*: which shards are held out is only known once the text is tokenized (held-out
shards are cut from the token stream, trainer/data/manifest.py), so the split does not exist
yet when the tokenizer is trained. What the held-out text can influence is the merge list --
which character sequences get a token of their own -- never a model weight; evaluation still
reads only text that no cluster trains on. Published tokenizers are trained the same way, on
a sample of the pretraining mixture that the evaluation split is later drawn from.

**Determinism.** The same text gives the same ``tokenizer.json`` bytes on every machine with
the same ``tokenizers`` version, whatever the thread count (``RAYON_NUM_THREADS``,
``TOKENIZERS_PARALLELISM``) or ``PYTHONHASHSEED``: the trainer has no randomness, pair counts
are exact integer sums (order-free), ties between equally frequent pairs go to the smaller
pair of ids, the byte alphabet is given whole (so ids do not depend on which bytes occur), and
the JSON lists the vocabulary by id and merges in order. The test suite trains twice in
separate processes with different thread counts and hash seeds and compares the bytes. The
``seed`` of a run plays no part: there is nothing to seed. The ``tokenizers`` version is
recorded in the manifest (``tokenizer.training.library``) because another version may
serialise differently.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from trainer.data.tokenizer import END_OF_TEXT_TOKEN
from trainer.errors import DataError

ALGORITHM = "byte-level-bpe/gpt2-pretokenizer"


@dataclass(frozen=True, kw_only=True)
class TrainedBpe:
    """A trained tokenizer and what the manifest says about its training."""

    tokenizer_json: bytes
    training: dict[str, Any]
    """``{"algorithm", "library", "max_bytes", "trained_bytes"}``."""


def library_version() -> str:
    import tokenizers

    return f"tokenizers=={tokenizers.__version__}"


def train_byte_level_bpe(texts: Iterable[str], *, vocab_size: int, max_bytes: int) -> TrainedBpe:
    """Train the BPE described above on ``texts`` (the corpus's pieces in stream order), reading
    at most ``max_bytes`` bytes of them. Raises DataError when the text cannot fill
    ``vocab_size`` tokens (too little text, or too few distinct pairs)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=0,
        special_tokens=[END_OF_TEXT_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    budget = _Budget(max_bytes)
    tokenizer.train_from_iterator(budget.take(texts), trainer=trainer)
    got = int(tokenizer.get_vocab_size(with_added_tokens=True))
    if got != vocab_size:
        raise DataError(
            f"expected a BPE vocabulary of {vocab_size} tokens, "
            f"{budget.used} bytes of text gave only {got} "
            "(add data, raise DataConfig.tokenizer_train_bytes "
            "or lower DataConfig.tokenizer_vocab_size)"
        )
    return TrainedBpe(
        tokenizer_json=str(tokenizer.to_str()).encode("utf-8"),
        training={
            "algorithm": ALGORITHM,
            "library": library_version(),
            "max_bytes": max_bytes,
            "trained_bytes": budget.used,
        },
    )


class _Budget:
    """Passes texts through until ``max_bytes`` UTF-8 bytes have gone by (see the docstring)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0

    def take(self, texts: Iterable[str]) -> Iterator[str]:
        for text in texts:
            data = text.encode("utf-8")
            room = self.max_bytes - self.used
            if len(data) <= room:
                self.used += len(data)
                yield text
                continue
            cut = data[:room].decode("utf-8", errors="ignore")  # drops a split trailing character
            self.used += len(cut.encode("utf-8"))
            if cut:
                yield cut
            return
