"""``veritrain bench``: measurements behind the project's performance claims.

One module per benchmark, each with one entry point that returns a result object with
``to_dict()`` (the ``--json`` output) and ``lines()`` (the human report):

| module | benchmark |
|---|---|
| ``comm`` | DiLoCoX against AllReduce and DiLoCo: convergence at equal tokens, bytes, throughput on an emulated slow link |
| ``ledger`` | appends per second (SQLite, PostgreSQL), verifying a 10,000-entry run, inclusion-proof latency over HTTP |
| ``storage`` | store-and-hash, S3 transfers and API downloads against their raw baselines, with peak memory |
| ``data`` | the shard builder's tokens/s, bytes/s and peak memory on a synthetic JSONL.gz + Parquet corpus |

Support modules:

* the emulated link: ``netns`` (namespaces, veth pairs, ``tc``), ``link_probe`` (the preflight
  transfer), ``software_shaper`` (the fallback without namespaces);
* runs of the real trainer: ``convergence`` (spawned, unshaped), ``throughput`` and
  ``rank_main`` (one process per rank on the link), ``metrics_recorder``;
* results: ``comm_results`` (the comm JSON from measurements, pure), ``plots``, ``stats``;
* ledger and storage: ``synthetic_run``, ``server`` (``veritrain serve`` in a process),
  ``memory_probe`` (a transfer or a corpus build and its peak memory in a fresh process),
  ``scratch``;
* data: ``synthetic_corpus`` (the corpus it builds).

The line rates, memory plans and the link derivation come from ``trainer/planner.py``.
"""  # noqa: E501
