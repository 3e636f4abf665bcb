"""The data manifest, as the trainer builds and reads it.

Its format has one typed home, :class:`records.data_manifest.DataManifest` (the recorder
puts it in the ledger as the ``data.manifest`` entry and a verifier reads it back); this
module adds what only the builder needs: which shards are held out.
"""

from __future__ import annotations

from records.data_manifest import FORMAT, DataManifest
from trainer.errors import DataError

__all__ = ["FORMAT", "DataManifest", "held_out_indices"]


def held_out_indices(n_shards: int, n_eval: int) -> list[int]:
    """Evenly spaced held-out shards: floor((k + 0.5) * n / E) for k < E (so evaluation samples
    the whole stream rather than its last files)."""
    if not 1 <= n_eval < n_shards:
        raise DataError(
            "expected fewer held-out shards than shards "
            f"({n_shards}) and at least one, got {n_eval}"
            " (use a larger corpus, smaller shard_tokens or fewer eval_shards)"
        )
    return sorted({int((k + 0.5) * n_shards / n_eval) for k in range(n_eval)})
