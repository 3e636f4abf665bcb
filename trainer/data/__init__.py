"""Training data: sources -> tokens -> fixed-size shards -> a manifest -> batches.

``prepare_data`` builds (or reuses) the shards of a ``DataConfig``; ``DataManifest`` is what the
ledger records; ``BatchReader`` serves the batches the assignment rule gives each cluster.
"""
