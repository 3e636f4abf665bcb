"""The data manifest (what the corpus is made of and how it is cut) and the ``data.manifest``
entry that records it (docs/records.md).

The manifest object, ``DataManifest.to_payload()`` as canonical JSON, is stored in the object
store; the entry names it and, when it fits, copies it inline::

    {"format": "veritrain.data-manifest/v1",
     "corpus": {"kind": "python-stdlib" | "files", ...how the sources were chosen},
     "sources": [{"uri", "sha256", "bytes", "license"}, ...],
     "tokenizer": {"kind", "vocab_size", "end_of_text", ...},
     "shard_format": {"dtype": "uint16" | "uint32", "byte_order": "little", "header_bytes": 0,
                      "tokens_per_shard": n, "file_name": "<sha256>.bin", "chunk_bytes": 4096},
     "shards": [{"index", "sha256", "tokens", "split": "train" | "eval", "chunks": <digest>}, ...],
     "dropped_tokens": k,
     "assignment": {"rule": ..., see trainer/data/assignment.py}}   # once a run attaches it

Chunk indices let a re-executor download only the windows a step read (HTTP Range) and still
verify every byte: a shard's ``chunks`` names an object holding the raw 32-byte SHA-256 of each
consecutive ``chunk_bytes``-byte piece of the shard (the last may be shorter), in order
(:func:`chunk_index`). The index is checked against its digest, each fetched chunk against the
index; ``veritrain verify`` checks that the index is the shard's. Manifests built before chunk
indices existed have neither field and are read whole.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from records.fields import Fields, is_digest
from records.versions import DATA_MANIFEST

FORMAT = "veritrain.data-manifest/v1"
SCHEMA = DATA_MANIFEST.current
TokenDtype = Literal["uint16", "uint32"]
TOKEN_DTYPES: tuple[TokenDtype, ...] = ("uint16", "uint32")
TOKEN_BYTES: Mapping[str, int] = {"uint16": 2, "uint32": 4}
SPLITS = ("train", "eval")
CHUNK_BYTES = 4096
"""Bytes per verifiable piece of a shard: a page, so a Range request for a 65-token window
(130 bytes at uint16) costs at most two chunks, and the index adds 32 / 4096 = 0.8 % to the
corpus."""


def chunk_index(data: bytes, chunk_bytes: int = CHUNK_BYTES) -> bytes:
    """The chunk index of a shard's bytes: the SHA-256 of each ``chunk_bytes`` piece,
    concatenated."""
    return b"".join(
        hashlib.sha256(data[start : start + chunk_bytes]).digest()
        for start in range(0, len(data), chunk_bytes)
    )


@dataclass(frozen=True, kw_only=True)
class Source:
    """One input file of the corpus."""

    uri: str
    """Machine-independent name: ``python-stdlib:3.11.7/abc.py`` or ``file:<relative path>``."""
    sha256: str
    bytes: int
    license: str
    """SPDX identifier, or ``unknown``."""

    def to_payload(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "sha256": self.sha256,
            "bytes": self.bytes,
            "license": self.license,
        }

    @classmethod
    def read(cls, f: Fields) -> Source:
        value = cls(
            uri=f.string("uri", nonempty=True),
            sha256=f.digest("sha256"),
            bytes=f.integer("bytes", minimum=0),
            license=f.string("license", nonempty=True),
        )
        f.exactly()
        return value


TOKENIZER_KINDS = ("bytes", "byte-level-bpe", "huggingface-tokenizers")
BYTE_VOCAB = 256
BYTE_END_OF_TEXT = 0


@dataclass(frozen=True, kw_only=True)
class TokenizerIdentity:
    """What the corpus was tokenized with, by what it *is* (trainer/data/tokenizer.py):
    ``{"kind": "bytes", "vocab_size": 256, "end_of_text": 0}``, or for the other kinds also the
    ``sha256`` of its Hugging Face ``tokenizer.json`` (stored as an object of the corpus) and its
    ``end_of_text_token``; a BPE trained at data-build time adds how (``training``)."""

    kind: str
    vocab_size: int
    """Ids are in ``[0, vocab_size)``, special tokens included."""
    end_of_text: int
    """The id appended after every document."""
    sha256: str | None = None
    end_of_text_token: str | None = None
    training: Mapping[str, Any] | None = field(default=None)

    def __post_init__(self) -> None:
        if self.kind not in TOKENIZER_KINDS:
            raise ValueError(
                f"expected a tokenizer kind in {', '.join(TOKENIZER_KINDS)}, got {self.kind!r}"
            )
        if not 0 <= self.end_of_text < self.vocab_size:
            raise ValueError(
                f"expected an end-of-text id below {self.vocab_size}, got {self.end_of_text}"
            )
        if self.kind == "bytes":
            if (self.vocab_size, self.end_of_text) != (BYTE_VOCAB, BYTE_END_OF_TEXT) or self.sha256:
                raise ValueError(
                    f"expected the byte tokenizer's identity to be vocab_size {BYTE_VOCAB}, "
                    f"end_of_text {BYTE_END_OF_TEXT} and no sha256, got {self}"
                )
        elif self.sha256 is None or not is_digest(self.sha256) or not self.end_of_text_token:
            raise ValueError(
                f"expected a {self.kind} tokenizer identity with "
                f"a hex sha256 and an end-of-text token, got {self}"
            )
        if (self.kind == "byte-level-bpe") != (self.training is not None):
            raise ValueError(
                f"expected training details exactly for a byte-level-bpe tokenizer, got {self}"
            )

    def to_payload(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": self.kind,
            "vocab_size": self.vocab_size,
            "end_of_text": self.end_of_text,
        }
        if self.sha256 is not None:
            data["sha256"] = self.sha256
            data["end_of_text_token"] = self.end_of_text_token
        if self.training is not None:
            data["training"] = dict(self.training)
        return data

    @classmethod
    def from_payload(cls, data: Any, *, where: str = "tokenizer identity") -> TokenizerIdentity:
        return cls.read(Fields(data, where=where))

    @classmethod
    def read(cls, f: Fields) -> TokenizerIdentity:
        kind = f.string("kind", choices=TOKENIZER_KINDS)
        vocab_size = f.integer("vocab_size", minimum=1)
        end_of_text = f.integer("end_of_text", minimum=0)
        sha256 = f.digest("sha256") if f.has("sha256") else None
        token = f.string("end_of_text_token", nonempty=True) if f.has("end_of_text_token") else None
        training = f.mapping("training") if f.has("training") else None
        f.exactly()
        try:
            return cls(
                kind=kind,
                vocab_size=vocab_size,
                end_of_text=end_of_text,
                sha256=sha256,
                end_of_text_token=token,
                training=training,
            )
        except ValueError as exc:
            raise f.fail("kind", "a consistent tokenizer identity", str(exc)) from None


@dataclass(frozen=True, kw_only=True)
class Shard:
    """One shard as the manifest lists it."""

    index: int
    """Position in the corpus's token stream (shard i holds tokens [i*n, (i+1)*n))."""
    sha256: str
    tokens: int
    chunks: str | None = None
    """Digest of the shard's chunk index object (:func:`chunk_index`), if it has one."""


@dataclass(frozen=True, kw_only=True)
class DataManifest:
    """A built corpus (and, once a run attaches it, the rule that assigns its windows)."""

    corpus: Mapping[str, Any]
    """How the sources were chosen (kind, Python identity for the stdlib corpus)."""
    sources: tuple[Source, ...]
    tokenizer: TokenizerIdentity
    dtype: TokenDtype
    shard_tokens: int
    shards: tuple[Shard, ...]
    eval_shards: tuple[int, ...]
    dropped_tokens: int
    assignment: Mapping[str, Any] | None = field(default=None)
    """The assignment rule's parameters (trainer/data/assignment.py ``AssignmentRule.to_dict``)."""
    chunk_bytes: int | None = None
    """The chunk size of every shard's chunk index (None: the shards have none)."""

    @property
    def train_shards(self) -> tuple[int, ...]:
        held_out = set(self.eval_shards)
        return tuple(s.index for s in self.shards if s.index not in held_out)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def object_digests(self) -> list[str]:
        """Every content-addressed file of the corpus: the shards in order, their chunk indices,
        then the tokenizer's ``tokenizer.json`` when it has one. What a recorder uploads."""
        extra = [self.tokenizer.sha256] if self.tokenizer.sha256 is not None else []
        indices = [s.chunks for s in self.shards if s.chunks is not None]
        return [s.sha256 for s in self.shards] + indices + extra

    @property
    def token_bytes(self) -> int:
        return TOKEN_BYTES[self.dtype]

    @property
    def shard_digests(self) -> dict[int, str]:
        return {s.index: s.sha256 for s in self.shards}

    def with_assignment(self, assignment: Mapping[str, Any]) -> DataManifest:
        return replace(self, assignment=dict(assignment))

    def to_payload(self) -> dict[str, Any]:
        held_out = set(self.eval_shards)
        data: dict[str, Any] = {
            "format": FORMAT,
            "corpus": dict(self.corpus),
            "sources": [s.to_payload() for s in self.sources],
            "tokenizer": self.tokenizer.to_payload(),
            "shard_format": {
                "dtype": self.dtype,
                "byte_order": "little",
                "header_bytes": 0,
                "tokens_per_shard": self.shard_tokens,
                "file_name": "<sha256>.bin",
                **({"chunk_bytes": self.chunk_bytes} if self.chunk_bytes is not None else {}),
            },
            "shards": [
                {
                    "index": s.index,
                    "sha256": s.sha256,
                    "tokens": s.tokens,
                    "split": "eval" if s.index in held_out else "train",
                    **({"chunks": s.chunks} if s.chunks is not None else {}),
                }
                for s in self.shards
            ],
            "dropped_tokens": self.dropped_tokens,
        }
        if self.assignment is not None:
            data["assignment"] = dict(self.assignment)
        return data

    @classmethod
    def from_payload(cls, data: Any, *, where: str = "data manifest") -> DataManifest:
        return cls.read(Fields(data, where=where))

    @classmethod
    def read(cls, f: Fields) -> DataManifest:
        f.string("format", choices=(FORMAT,))
        shard_format = f.obj("shard_format")
        dtype = shard_format.string("dtype", choices=TOKEN_DTYPES)
        shard_tokens = shard_format.integer("tokens_per_shard", minimum=2)
        shard_format.string("byte_order", choices=("little",))
        if shard_format.integer("header_bytes") != 0:
            raise shard_format.fail("header_bytes", "0", shard_format.data["header_bytes"])
        shard_format.string("file_name")
        chunk_bytes = (
            shard_format.integer("chunk_bytes", minimum=1)
            if shard_format.has("chunk_bytes")
            else None
        )
        shard_format.exactly()
        rows = f.items("shards", _read_shard)
        for position, (shard, _) in enumerate(rows):
            if shard.index != position:
                raise f.fail(
                    f"shards[{position}].index", f"{position} (shards in stream order)", shard.index
                )
            if (shard.chunks is None) != (chunk_bytes is None):
                expected = (
                    "a chunk index (shard_format.chunk_bytes is set)"
                    if chunk_bytes
                    else "no chunk index"
                )
                raise f.fail(f"shards[{position}].chunks", expected, shard.chunks)
        value = cls(
            corpus=f.mapping("corpus"),
            sources=f.items("sources", Source.read),
            tokenizer=TokenizerIdentity.read(f.obj("tokenizer")),
            dtype=dtype,  # type: ignore[arg-type]  # checked against TOKEN_DTYPES above
            shard_tokens=shard_tokens,
            shards=tuple(shard for shard, _ in rows),
            eval_shards=tuple(shard.index for shard, split in rows if split == "eval"),
            dropped_tokens=f.integer("dropped_tokens", minimum=0),
            assignment=f.mapping("assignment") if f.has("assignment") else None,
            chunk_bytes=chunk_bytes,
        )
        f.exactly()
        return value

    def digest(self) -> str:
        """SHA-256 of the manifest's sorted-key JSON: a short name for "this exact corpus"."""
        text = json.dumps(self.to_payload(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def _read_shard(f: Fields) -> tuple[Shard, str]:
    shard = Shard(
        index=f.integer("index", minimum=0),
        sha256=f.digest("sha256"),
        tokens=f.integer("tokens", minimum=0),
        chunks=f.digest("chunks") if f.has("chunks") else None,
    )
    split = f.string("split", choices=SPLITS)
    f.exactly()
    return shard, split


@dataclass(frozen=True, kw_only=True)
class DataManifestSummary:
    """What a ``data.manifest`` entry holds in place of a manifest too large to inline: the
    manifest without its source and shard lists, and how many of each there are."""

    manifest: Mapping[str, Any]
    """The manifest's other top-level fields (format, corpus, tokenizer, shard_format, ...)."""
    source_count: int
    shard_count: int

    @classmethod
    def of(cls, manifest: DataManifest) -> DataManifestSummary:
        rest = {k: v for k, v in manifest.to_payload().items() if k not in ("sources", "shards")}
        return cls(
            manifest=rest, source_count=len(manifest.sources), shard_count=len(manifest.shards)
        )

    def to_payload(self) -> dict[str, Any]:
        return {**self.manifest, "source_count": self.source_count, "shard_count": self.shard_count}

    @classmethod
    def read(cls, f: Fields) -> DataManifestSummary:
        source_count = f.integer("source_count", minimum=0)
        shard_count = f.integer("shard_count", minimum=0)
        f.string("format", choices=(FORMAT,))
        rest = {k: v for k, v in f.data.items() if k not in ("source_count", "shard_count")}
        if "sources" in rest or "shards" in rest:
            raise f.fail("sources", "no source or shard list in a summary", sorted(rest))
        return cls(manifest=rest, source_count=source_count, shard_count=shard_count)


INLINE_LIMIT = 32 * 1024
"""A manifest whose canonical JSON is at most this many bytes is copied into its entry (half
the ledger's 64 KiB entry limit); larger ones are summarised."""


@dataclass(frozen=True, kw_only=True)
class DataManifestEntry:
    """The ``data.manifest`` payload (entry 1)."""

    manifest_object: str
    """Digest of the stored manifest object (its canonical JSON)."""
    manifest: DataManifest | DataManifestSummary
    schema: str = field(default=SCHEMA)

    @property
    def inline(self) -> bool:
        return isinstance(self.manifest, DataManifest)

    @classmethod
    def recording(
        cls, manifest: DataManifest, *, manifest_object: str, document_bytes: int
    ) -> DataManifestEntry:
        """The entry for ``manifest`` stored as ``manifest_object`` (``document_bytes`` long)."""
        inline = document_bytes <= INLINE_LIMIT
        return cls(
            manifest_object=manifest_object,
            manifest=manifest if inline else DataManifestSummary.of(manifest),
        )

    def to_payload(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "manifest_object": self.manifest_object,
            "inline": self.inline,
            "manifest": self.manifest.to_payload(),
        }

    @classmethod
    def from_payload(cls, payload: Any, *, where: str = "data.manifest") -> DataManifestEntry:
        f = Fields(payload, where=where)
        version = DATA_MANIFEST.version_of(f)
        inline = f.boolean("inline")
        body = f.obj("manifest")
        manifest: DataManifest | DataManifestSummary = (
            DataManifest.read(body) if inline else DataManifestSummary.read(body)
        )
        value = cls(
            manifest_object=f.digest("manifest_object"),
            manifest=manifest,
            schema=DATA_MANIFEST.schema(version),
        )
        f.exactly()
        return value
