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

Counted: tensor bytes on the wire. Not counted: protocol headers, the few bytes of timing and
loss the runtime all-reduces, and intra-cluster traffic (pipeline activations), which is the
same for every method.
"""

from __future__ import annotations

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


def _check(*, parameters: int, n_clusters: int, inner_steps: int) -> None:
    if n_clusters < 1:
        raise ConfigError(f"expected n_clusters >= 1, got {n_clusters}")
    if inner_steps < 1:
        raise ConfigError(f"expected inner_steps >= 1, got {inner_steps}")
    if parameters < 0:
        raise ConfigError(f"expected a non-negative size, got {parameters}")
