"""The data manifest, as the trainer builds and reads it.

Its format has one typed home, :class:`records.data_manifest.DataManifest` (the recorder
puts it in the ledger as the ``data.manifest`` entry and a verifier reads it back); this
module adds what only the builder needs: which shards are held out, and which
content-addressed files make up the corpus.
"""

from __future__ import annotations

from records.data_manifest import FORMAT, DataManifest
from trainer.errors import DataError

__all__ = ["FORMAT", "DataManifest", "held_out_indices", "object_digests"]


def object_digests(manifest: DataManifest) -> list[str]:
    """Every content-addressed file of the corpus: the shards in order, then the tokenizer's
    ``tokenizer.json`` when it has one (a trained BPE or a given file; trainer/data/tokenizer.py).
    What a recorder uploads and a re-executor downloads; a ``ShardSource`` serves all of them."""
    digests = [s.sha256 for s in manifest.shards]
    sha256 = manifest.tokenizer.get("sha256")
    if isinstance(sha256, str):
        digests.append(sha256)
    return digests


def held_out_indices(n_shards: int, n_eval: int) -> list[int]:
    """Evenly spaced held-out shards: floor((k + 0.5) * n / E) for k < E (so evaluation samples
    the whole stream rather than its last files)."""
    if not 1 <= n_eval < n_shards:
        raise DataError(
            f"expected fewer held-out shards than shards ({n_shards}) and at least one, got {n_eval}"
            " (use a larger corpus, smaller shard_tokens or fewer eval_shards)"
        )
    return sorted({int((k + 0.5) * n_shards / n_eval) for k in range(n_eval)})
