"""Bytes one cluster puts on the inter-cluster links per outer step (H inner steps).

The comparison the benchmarks and docs/outer-algorithm.md report, as pure functions:

* **AllReduce baseline** -- data parallelism across clusters: every inner step all-reduces the
  fp32 gradients. A bandwidth-optimal ring all-reduce (reduce-scatter then all-gather; Patarasuk
  & Yuan 2009, the algorithm NCCL and gloo use for large tensors) sends ``2(C−1)/C · N`` bytes
  per participant for an ``N``-byte buffer, so per outer step one cluster sends
  ``2(C−1)/C · 4 · params · H``.
* **DiLoCo / DiLoCoX** -- once per outer step every cluster's payload is all-gathered; a ring
  all-gather sends ``(C−1)/C`` of the gathered ``C · payload`` bytes per participant, i.e.
  ``(C−1) · payload_bytes``.

* **DiLoCoX, owner-reduce** (trainer/outer/owner_reduce.py) -- every contributor sends each
  owner its share of its payload (an all-to-all: the payload less its own share), then each owner
  sends its re-encoded mean share to the others (``(C−1) · share``). Averaged over the clusters
  that is ``2(C−1)/C · payload_bytes`` -- AllReduce's own factor, which does not grow with C; the
  busiest cluster, the owner of the largest share ``s``, sends ``payload − s + (C−1)·s``. The
  verdict statistics (``C(C+1)/2 + C + 2`` float64 sums per stage) are summed the same way: each
  owner sums one chunk of them over the owners and all-gathers its sum, ``2(C−1)/C`` of them per
  cluster, not the ``C−1`` copies an all-gather of every owner's whole share would send.

Counted: tensor bytes on the wire. Not counted: protocol headers, the few bytes of timing and
loss the runtime all-reduces, and intra-cluster traffic (pipeline activations), which is the
same for every method.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainer.errors import ConfigError


def allreduce_bytes_per_outer_step(
    *, parameters: int, n_clusters: int, inner_steps: int, bytes_per_element: int = 4
) -> float:
    """``2(C−1)/C · bytes_per_element · parameters · H``: gradients ring-all-reduced every step."""
    _check(parameters=parameters, n_clusters=n_clusters, inner_steps=inner_steps)
    return 2.0 * (n_clusters - 1) / n_clusters * bytes_per_element * parameters * inner_steps


def allgather_bytes_per_outer_step(*, payload_bytes: int, n_clusters: int) -> int:
    """``(C−1) · payload_bytes``: one payload per cluster ring-all-gathered once per outer step."""
    _check(parameters=payload_bytes, n_clusters=n_clusters, inner_steps=1)
    return (n_clusters - 1) * payload_bytes


def statistics_floats(clusters: int) -> int:
    """Float64 numbers an owner sends of its statistics for ``clusters`` contributors: the Gram
    matrix's upper triangle, the inner products with the previous mean, its square and whether
    there is one (trainer/runtime/owner_exchange.py)."""
    return clusters * (clusters + 1) // 2 + clusters + 2


def statistics_chunks(floats: int, owners: int) -> list[int]:
    """How many of the statistics' ``floats`` each of ``owners`` owners sums (owner order,
    contiguous): as even as can be, the first ``floats mod owners`` one longer."""
    if owners < 1:
        raise ConfigError(f"expected at least one owner, got {owners}")
    size, longer = divmod(floats, owners)
    return [size + 1 if o < longer else size for o in range(owners)]


def owner_reduce_cluster_bytes(*, share_bytes: Sequence[int], owner: int) -> int:
    """Bytes contributor ``owner`` (of ``C = len(share_bytes)``) sends in one owner-reduce
    round whose owners hold shares of ``share_bytes`` bytes of the payload: the payload less its
    share and the statistics less its chunk (to their owners), then its mean share and its
    chunk's sums (to the ``C−1`` others); the statistics are float64."""
    n_clusters = len(share_bytes)
    payload, share = sum(share_bytes), share_bytes[owner]
    _check(parameters=payload, n_clusters=n_clusters, inner_steps=1)
    floats = statistics_floats(n_clusters)
    chunk = statistics_chunks(floats, n_clusters)[owner]
    statistics = floats - chunk + (n_clusters - 1) * chunk
    return payload - share + (n_clusters - 1) * share + 8 * statistics


def owner_reduce_bytes_per_outer_step(*, share_bytes: Sequence[int]) -> float:
    """:func:`owner_reduce_cluster_bytes` averaged over the ``C`` contributors:
    ``2(C−1)/C · (payload + 8 · (C(C+1)/2 + C + 2))``."""
    n = len(share_bytes)
    return sum(owner_reduce_cluster_bytes(share_bytes=share_bytes, owner=o) for o in range(n)) / n


def _check(*, parameters: int, n_clusters: int, inner_steps: int) -> None:
    if n_clusters < 1:
        raise ConfigError(f"expected n_clusters >= 1, got {n_clusters}")
    if inner_steps < 1:
        raise ConfigError(f"expected inner_steps >= 1, got {inner_steps}")
    if parameters < 0:
        raise ConfigError(f"expected a non-negative size, got {parameters}")
