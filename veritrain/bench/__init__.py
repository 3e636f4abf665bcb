"""``veritrain bench``: measurements behind the project's performance claims.

One module per benchmark, each with one entry point that returns a result object with
``to_dict()`` (the ``--json`` output) and ``lines()`` (the human report):

| module | benchmark |
|---|---|
| ``comm`` | DiLoCoX against AllReduce and DiLoCo: convergence at equal tokens, bytes, throughput on an emulated slow link |
| ``ledger`` | appends per second (SQLite, PostgreSQL), verifying a 10,000-entry run, inclusion-proof latency over HTTP |
| ``storage`` | store-and-hash, S3 transfers and API downloads against their raw baselines, with peak memory |

Support: ``netns`` and ``software_shaper`` (the emulated link), ``convergence`` and
``throughput`` (runs of the real trainer), ``comm_results`` (the comm JSON from
measurements), ``synthetic_run``, ``server``, ``memory_probe``, ``plots``, ``stats``.
"""
