"""The data manifest: what the corpus is made of and how it is cut, as a JSON-able dict.

The recorder puts ``DataManifest.to_dict()`` in the ledger as the ``data.manifest`` entry
(DESIGN.md §3) and uploads the shards it lists. Layout::

    {"format": "veritrain.data-manifest/v1",
     "corpus": {"kind": "python-stdlib" | "files", "python": {...}, "selection": "..."},
     "sources": [{"uri", "sha256", "bytes", "license"}, ...],
     "tokenizer": {"kind": "bytes", "vocab_size": 256, "end_of_text": 0} | {..., "sha256"},
     "shard_format": {"dtype": "uint16", "byte_order": "little", "header_bytes": 0,
                      "tokens_per_shard": n, "file_name": "<sha256>.bin"},
     "shards": [{"index", "sha256", "tokens", "split": "train" | "eval"}, ...],
     "dropped_tokens": k,
     "assignment": {"rule": ..., see assignment.py}}      # only once a run attaches its rule
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.data.assignment import AssignmentRule
from trainer.data.shards import ShardInfo, TokenDtype
from trainer.errors import DataError

FORMAT = "veritrain.data-manifest/v1"


@dataclass(frozen=True, kw_only=True)
class DataManifest:
    """A built corpus (and, once a run attaches it, the rule that assigns its windows)."""

    corpus: Mapping[str, Any]
    """How the sources were chosen (kind, Python identity for the stdlib corpus)."""
    sources: Sequence[Mapping[str, Any]]
    tokenizer: Mapping[str, Any]
    dtype: TokenDtype
    shard_tokens: int
    shards: Sequence[ShardInfo]
    eval_shards: Sequence[int]
    dropped_tokens: int
    assignment: Mapping[str, Any] | None = field(default=None)

    @property
    def train_shards(self) -> tuple[int, ...]:
        held_out = set(self.eval_shards)
        return tuple(s.index for s in self.shards if s.index not in held_out)

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer["vocab_size"])

    def with_rule(self, rule: AssignmentRule) -> DataManifest:
        return DataManifest(**{**self.__dict__, "assignment": rule.to_dict()})

    def to_dict(self) -> dict[str, Any]:
        held_out = set(self.eval_shards)
        data: dict[str, Any] = {
            "format": FORMAT,
            "corpus": dict(self.corpus),
            "sources": [dict(s) for s in self.sources],
            "tokenizer": dict(self.tokenizer),
            "shard_format": {
                "dtype": self.dtype,
                "byte_order": "little",
                "header_bytes": 0,
                "tokens_per_shard": self.shard_tokens,
                "file_name": "<sha256>.bin",
            },
            "shards": [
                {
                    "index": s.index,
                    "sha256": s.sha256,
                    "tokens": s.tokens,
                    "split": "eval" if s.index in held_out else "train",
                }
                for s in self.shards
            ],
            "dropped_tokens": self.dropped_tokens,
        }
        if self.assignment is not None:
            data["assignment"] = dict(self.assignment)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DataManifest:
        if data.get("format") != FORMAT:
            raise DataError(f"expected a data manifest of format {FORMAT!r}, got {data.get('format')!r}")
        try:
            shard_format = data["shard_format"]
            shards = [
                ShardInfo(index=int(s["index"]), sha256=str(s["sha256"]), tokens=int(s["tokens"]))
                for s in data["shards"]
            ]
            return cls(
                corpus=dict(data["corpus"]),
                sources=[dict(s) for s in data["sources"]],
                tokenizer=dict(data["tokenizer"]),
                dtype=shard_format["dtype"],
                shard_tokens=int(shard_format["tokens_per_shard"]),
                shards=shards,
                eval_shards=[int(s["index"]) for s in data["shards"] if s["split"] == "eval"],
                dropped_tokens=int(data["dropped_tokens"]),
                assignment=data.get("assignment"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"expected a complete data manifest, got a malformed one: {exc!r}") from exc

    def digest(self) -> str:
        """SHA-256 of the manifest's sorted-key JSON: a short name for "this exact corpus"."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def held_out_indices(n_shards: int, n_eval: int) -> list[int]:
    """Evenly spaced held-out shards: floor((k + 0.5) * n / E) for k < E (so evaluation samples
    the whole stream rather than its last files)."""
    if not 1 <= n_eval < n_shards:
        raise DataError(
            f"expected fewer held-out shards than shards ({n_shards}) and at least one, got {n_eval}"
            " (use a larger corpus, smaller shard_tokens or fewer eval_shards)"
        )
    return sorted({int((k + 0.5) * n_shards / n_eval) for k in range(n_eval)})
